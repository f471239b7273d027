"""Steps from model calls, for ``whyidle run --window`` on a process that serves requests.

A serving loop steps no optimizer and often iterates no DataLoader: it takes a request from a
queue and calls the model. Two global module hooks (``torch.nn.modules.module``'s
``register_module_forward_pre_hook`` and ``register_module_forward_hook(always_call=True)``,
so a call that raises still ends) see every module call; the outermost one (depth 0) is a model
call::

    host   [wait for a request][model(x) ...........][wait for a request][model(x) ...]
           ^ step i starts (end of call i-1)          ^ step i ends: the next begins

Each call is a step whose wait is the time since the previous call ended (the tracker's
``waited``), its samples the leading dimension of the call's first tensor. The same hooks open
and close the ``--window`` profiler session (:meth:`Recorder.window_tick`), in the program's
thread. Installed only with ``--window``: they run at every module call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["install_model_calls"]


def install_model_calls(rec: Any) -> Callable[[], None]:
    """Install the two global hooks for ``rec`` (a run_hook.Recorder); returns their removal."""
    module = importlib.import_module("torch.nn.modules.module")
    depth = [0]

    def pre(mod: Any, args: Any) -> None:
        depth[0] += 1
        if depth[0] == 1:
            rec.call_started(args)

    def post(mod: Any, args: Any, output: Any) -> None:
        depth[0] = max(depth[0] - 1, 0)
        if depth[0] == 0:
            rec.call_ended()

    handles = [module.register_module_forward_pre_hook(pre), module.register_module_forward_hook(post, always_call=True)]

    def remove() -> None:
        for h in handles:
            h.remove()

    return remove
