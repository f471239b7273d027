"""What a helper does beside this process (:class:`Errand`), and an errand done here, each part
when its result is asked for (:class:`Beside`): the sequential half of :mod:`whyidle.parallel`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar

__all__ = ["Errand", "Beside"]

P = TypeVar("P")
Q = TypeVar("Q")
U = TypeVar("U")
E = TypeVar("E")
Q_contra = TypeVar("Q_contra", contravariant=True)
U_co = TypeVar("U_co", covariant=True)
E_co = TypeVar("E_co", covariant=True)


class Errand(Protocol[P, Q_contra, U_co, E_co]):
    """Work that a helper may do beside this process, from the plain data the errand holds: a
    small result needed first (:meth:`early`), then a long preparation (:meth:`prepare`), steps
    that make likely answers faster while no question has come (:meth:`idle`), and the answer to
    the question this process asks later (:meth:`answer`). Each must be a pure function of the
    errand's data: done here or in a child, it gives the same result."""

    def early(self) -> E_co: ...

    def prepare(self) -> P: ...

    def idle(self, prepared: P) -> Iterable[object]: ...

    def answer(self, prepared: P, question: Q_contra) -> U_co: ...


class Beside(Generic[Q, U, E]):
    """An errand under way. Here (this class) each part runs when its result is asked for, in
    this process: :meth:`early` makes the early result, :meth:`result` prepares and answers.
    :class:`whyidle.parallel.forked.Relay` is the same with a forked child doing the work.
    Use it as a context manager: leaving the block stops any work not asked for."""

    def __init__(self, errand: Errand[P, Q, U, E]) -> None:
        self.errand: Errand[object, Q, U, E] = errand  # type: ignore[assignment]  # P is the errand's own business
        self.question: tuple[Q] | None = None
        self.early_read: tuple[E] | None = None

    def early(self) -> E:
        """The errand's early result (made once)."""
        if self.early_read is None:
            self.early_read = (self.errand.early(),)
        return self.early_read[0]

    def ask(self, question: Q) -> None:
        """The question :meth:`result` answers."""
        self.question = (question,)

    def result(self) -> U:
        """The answer to the question asked (prepared and answered here)."""
        if self.question is None:
            raise RuntimeError("Beside.result() before ask()")
        return self.errand.answer(self.errand.prepare(), self.question[0])

    def __enter__(self) -> Beside[Q, U, E]:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
