"""whyidle in Hugging Face Transformers: a ``TrainerCallback`` for ``Trainer``.

::

    import whyidle

    trainer = Trainer(model=model, args=args, train_dataset=ds)
    trainer.add_callback(whyidle.HFCallback(trainer))    # figures go out through trainer.log
    trainer.train()
    # at the end of training: the report in the terminal, whyidle.html and whyidle.json in
    # args.output_dir, and the headline figures (whyidle/busy_fraction, ...) logged

Given the trainer, the headline figures are logged with ``trainer.log``, so every ``report_to=``
integration receives them; without it (``Trainer(callbacks=[whyidle.HFCallback()])``: the callback
is built before the trainer) they are added to ``trainer.state.log_history`` only. Each optimizer
step is a step of the step tracker (:mod:`whyidle.capture.trainer_hooks`); its samples are
``per_device_train_batch_size x gradient_accumulation_steps``. ``profile=True`` also records a
torch.profiler window with :func:`whyidle.schedule` into ``<output_dir>/whyidle-traces``.
"""

from __future__ import annotations

from typing import Any

from whyidle.capture.trainer_hooks import HookedCallback
from whyidle.config import Config
from whyidle.errors import MissingExtraError

__all__ = ["HFCallback"]


def _callback_base() -> Any:
    try:
        from transformers import TrainerCallback
    except ImportError as exc:
        raise MissingExtraError("whyidle.HFCallback", "hf", "transformers") from exc
    return TrainerCallback


class HFCallback(_callback_base(), HookedCallback):  # type: ignore[misc]
    """A Trainer callback: track every optimizer step, report why the device waited at the end.

    ``trainer``: the Trainer, to log the figures through it (see the module docstring).
    ``skip_first``, ``profile``, ``config``, ``write``: as for the Lightning callback.
    """

    def __init__(self, trainer: Any = None, *, skip_first: int = 1, profile: bool = False, config: Config | None = None, write: bool = True, width: int = 100) -> None:
        self.trainer = trainer
        self._setup("the Hugging Face Trainer loop (whyidle.HFCallback)", skip_first=skip_first, profile=profile, config=config, write=write, width=width)
        self._samples: int | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, train_dataloader: Any = None, **kwargs: Any) -> None:
        self.hooks.device = "cpu" if str(getattr(args, "device", "cpu")).startswith(("cpu", "mps")) else "auto"
        self._samples = int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps)
        self.hooks.start(train_dataloader, batch_size=self._samples, out_dir=args.output_dir if self.hooks.profile else None)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.hooks.batch_ready()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.hooks.step_done(samples=self._samples)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        self.hooks.other_work_done()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.hooks.other_work_done()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.hooks.other_work_done()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        zero = bool(state.is_world_process_zero)
        self.figures = self.hooks.finish(args.output_dir, write=self.write and zero)
        if not (zero and self.figures):
            return
        if self.trainer is not None:
            self.trainer.log(dict(self.figures))
        else:
            state.log_history.append({**self.figures, "step": state.global_step})
