"""The shared benchmark workload lives in the package (``threadmind.workload``) so ``threadmind demo`` can use it."""

from __future__ import annotations

from threadmind.workload import *  # noqa: F403
from threadmind.workload import __all__ as __all__
