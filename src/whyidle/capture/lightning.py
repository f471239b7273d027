"""whyidle in PyTorch Lightning: ``Trainer(callbacks=[whyidle.LightningCallback()])``.

::

    import whyidle

    trainer = pl.Trainer(max_epochs=1, callbacks=[whyidle.LightningCallback()])
    trainer.fit(model, datamodule)
    # at the end of fit: the report in the terminal, whyidle.html and whyidle.json in the log dir,
    # and the headline figures (whyidle/busy_fraction, ...) sent to every logger of the trainer

Each training batch is a step of the step tracker (:mod:`whyidle.capture.trainer_hooks` says
what is measured from which hook); ``profile=True`` also records a torch.profiler window with
:func:`whyidle.schedule` (steps 8-10) into ``<log dir>/whyidle-traces`` and diagnoses it. Works
with ``lightning`` (``lightning.pytorch``) or ``pytorch_lightning``, whichever is installed
(``lightning`` first). On several ranks each rank tracks itself; global rank 0 reports.
"""

from __future__ import annotations

from typing import Any

from whyidle.capture.trainer_hooks import HookedCallback
from whyidle.config import Config
from whyidle.errors import MissingExtraError

__all__ = ["LightningCallback"]


def _callback_base() -> Any:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError as exc:
            raise MissingExtraError("whyidle.LightningCallback", "lightning", "pytorch-lightning") from exc
    return Callback


class LightningCallback(_callback_base(), HookedCallback):  # type: ignore[misc]
    """A Lightning callback: track every training step, report why the device waited at the end of fit.

    ``skip_first``: steps left out as start-up (DataLoader workers, first calls). ``profile``:
    also capture a profiler window. ``config``: whyidle's thresholds. ``write=False`` keeps the
    files and the printed report off (the figures still go to the loggers; ``.report`` holds it).
    """

    def __init__(self, *, skip_first: int = 1, profile: bool = False, config: Config | None = None, write: bool = True, width: int = 100) -> None:
        super().__init__()
        self._setup("the Lightning fit loop (whyidle.LightningCallback)", skip_first=skip_first, profile=profile, config=config, write=write, width=width)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        loader = trainer.train_dataloader
        device = getattr(pl_module, "device", None)
        self.hooks.device = "cpu" if device is not None and getattr(device, "type", "") != "cuda" else "auto"
        out_dir = (trainer.log_dir or trainer.default_root_dir) if self.hooks.profile else None  # log_dir: every rank calls it
        self.hooks.start(loader if not isinstance(loader, (list, tuple, dict)) else None, out_dir=out_dir)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.hooks.batch_ready()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.hooks.step_done(batch)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self.hooks.other_work_done()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self.hooks.other_work_done()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        out_dir = trainer.log_dir or trainer.default_root_dir  # log_dir broadcasts: every rank calls it
        zero = bool(trainer.is_global_zero)
        self.figures = self.hooks.finish(out_dir, write=self.write and zero)
        if zero and self.figures:
            for logger in trainer.loggers:
                logger.log_metrics(self.figures, step=trainer.global_step)
                logger.save()
