"""Known noise, handled where it arises, so a console or an executed notebook shows only what matters.

- ADK marks the eval classes the workbook uses as experimental and warns on first use of each
  (`[EXPERIMENTAL] LocalEvalService: ...`): those UserWarnings are ignored, by message, only when
  raised from ADK's or the workbook's own modules; every other warning still shows.
- A batch kernel (papermill: `make report`, the tests) talks to its parent over local Unix sockets
  (ipykernel's IPC transport) instead of TCP, so the kernel has no reason to warn "Kernel is running
  over TCP without encryption", and its progress bars are off: papermill keeps no widget state,
  so a bar would stay in the executed notebook and the report as a stale "0%".
"""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any

from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum

ADK_EXPERIMENTAL = r"\[EXPERIMENTAL\] "  # ADK's feature_decorator prefix
NOISY_MODULES = r"(google\.adk|workbook)(\.|$)"  # where the workbook's ADK calls are made


def ignore_known_noise() -> None:
    """Ignore ADK's experimental-feature UserWarnings raised from ADK's or the workbook's modules."""
    warnings.filterwarnings("ignore", message=ADK_EXPERIMENTAL, category=UserWarning, module=NOISY_MODULES)


class BatchKernelManager(AsyncKernelManager):
    """A kernel manager for batch runs (papermill's `kernel_manager_class`): IPC transport where the
    platform has Unix sockets, and WORKBOOK_PROGRESS=off in the kernel's environment."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc" if os.name == "posix" else "tcp", config=True)

    async def start_kernel(self, **kw: Any) -> None:
        """Start the kernel with progress bars off (papermill would keep them as stale text)."""
        kw["env"] = {**(kw.get("env") or os.environ), "WORKBOOK_PROGRESS": "off"}
        if self.transport == "ipc" and not self.connection_file:
            # Jupyter's default socket names (kernel-ipc-1..5 in the working folder) are picked by
            # looking for free names: kernels started at once by parallel report jobs would pick the
            # same ones. Named after a unique connection file (a temporary one, as jupyter_client makes
            # by default), as jupyter_client names them when a connection file is given.
            handle, self.connection_file = tempfile.mkstemp(prefix="kernel-", suffix=".json")
            os.close(handle)
            self.ip = os.path.splitext(self.connection_file)[0] + "-ipc"
        await super().start_kernel(**kw)
