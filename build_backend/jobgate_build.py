"""jobgate's PEP 517 build backend: maturin's, behind one check.

Building jobgate from source (`pip install .`, an sdist, the source pre-commit hook)
compiles its Rust core, which takes cargo. Where cargo is missing, maturin's backend
quietly downloads a whole Rust toolchain (hundreds of MB, through `puccinialin`) into
the user's cache and builds anyway; this one refuses instead, before anything is
fetched, and says what to install. Every hook is maturin's own once cargo is found.
"""

from __future__ import annotations

import os
import shutil
import sys

# maturin reads this in every hook: never fetch a toolchain, whatever calls it.
os.environ["MATURIN_NO_INSTALL_RUST"] = "1"

import maturin  # noqa: E402 - the variable above must be set first

NO_CARGO = """
jobgate: building jobgate from source compiles its Rust core, and cargo is not on PATH.

  Install a Rust toolchain (cargo and rustc): https://rustup.rs, or your
  distribution's packages (Debian and Ubuntu: apt-get install cargo), then try again.

  Or do not build at all: install a prebuilt wheel (pip install jobgate) and, in
  pre-commit, use the jobgate-check-installed hook, which runs that jobgate.

No Rust toolchain is downloaded behind your back (maturin would fetch one; jobgate
turns that off).
"""


def require_cargo() -> None:
    """Exits the build, saying what to install, unless cargo is on PATH."""
    if shutil.which("cargo") is None:
        sys.stderr.write(NO_CARGO)
        sys.stderr.flush()
        raise SystemExit(1)


def get_requires_for_build_wheel(config_settings=None):
    require_cargo()
    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings=None):
    require_cargo()
    return maturin.get_requires_for_build_editable(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    require_cargo()  # maturin reads the crate's files through cargo metadata
    return maturin.get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    require_cargo()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    require_cargo()
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    require_cargo()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    require_cargo()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    require_cargo()
    return maturin.build_sdist(sdist_directory, config_settings)
