# Names vulture (dead-code finder) reports as unused that are used from outside the code it
# reads; reviewed by hand. tests/test_dead_code.py runs vulture over src/whyidle with this file.
# ruff: noqa
# mypy: ignore-errors
_ = object()

# PEP 562 module hooks (`import whyidle` resolves public names lazily)
__getattr__
__dir__

# Callbacks the trainers call (transformers.TrainerCallback, lightning.Callback); their unused
# parameters are part of the callback signatures
_.on_train_begin
_.on_step_begin
_.on_step_end
_.on_log
logs
_.on_evaluate
_.on_save
_.on_train_end
_.on_train_start
_.on_train_batch_start
batch_idx
_.on_train_batch_end
outputs
_.on_validation_end
_.on_save_checkpoint
_.on_fit_end
_.forward  # torch.nn.Module.forward (sweep/examples.py)

# Read by other libraries: argparse, sqlite3, torch's backend flags, IPython/Jupyter
_.formatter_class
_.text_factory
_.allow_tf32
_._repr_html_

# Public API for users (documented; used by user code and notebooks, not by whyidle itself)
_.with_overrides
_.to_pandas
_.trials
_.grad_scaler
_.compile_model
EXIT_GATE  # the CLI's documented exit statuses (cli.py)
EXIT_OK
COUNTER  # LaneKind.COUNTER: a lane kind that saved timelines may name

# Fields of result structs, serialised whole into JSON reports (msgspec.to_builtins)
description
wall_s
p50_ns
p95_ns
p99_ns
checked
max_rel_dev
worst_step
single_capacity_per_s
peak_curve_per_s
instances_that_fit
mig_gpu
mig_fits
tuner_command
wait_ns
arrivals_to_idle_server
measured_steps
setup_ns
measure_ns
graph_break_reasons
recompile_reasons

# Read through operator.attrgetter by field name (sources/kineto_columns.py's _GET, _ARG and _INPUTS)
_.correlation
_.ph
_.input_type
_.collective
_.in_nelems
_.out_nelems
_.comm_dtype
# Renderer.binary: part of the declared registry (whyidle.render.RENDERERS) for callers choosing a write mode
_.binary
# _Thread.tops_overlapping: the per-gap lookup tests/test_evidence_index.py checks the all-gap index against
_.tops_overlapping
# whyidle run's hook (capture/run_hook.py): the overhead's fields are written into the process
# record with dataclasses.asdict and read by capture/run_report.py by name; uninstall() is what
# tests call to take the hook out of their own process
outside_ns
outside_steps
profiled_ns
_.uninstall
# Fields of schemas that msgspec.convert checks a decoded document against (findings/saved.py's
# _CriticalPath, sources/parquet.py's _Side): read by msgspec, not by name
by_kind_ns
segments
segments_left_out
format_version
# argparse calls _print_message (cli.py's _Parser: --help to a full disk is an error)
_._print_message
# analyses/peaks.py: DevicePeak.tflops reads a precision field by name (getattr), fp16 among them
fp16
# Fields written and read only by the JSON codecs, through their field tables (findings/codec.py,
# findings/codec_parts.py, ranks/model.py): getattr and keyword arguments by name
short_ns
share_of_step
samples_per_s_after
all_steps
other_causes
slowest_rank
