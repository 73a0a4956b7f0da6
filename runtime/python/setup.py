"""Builds the aryl module for pip (pyproject.toml): the Python files of aryl/ and the
_aryl extension, which the project's CMake builds (target aryl_python, over the static
aryl_runtime) for the Python that runs pip.

ARYL_BUILD_DIR: a configured Aryl build tree to build _aryl in (its ARYL_PYTHON must be of
the same Python version); default: a fresh tree in pip's temporary build directory.
ARYL_CMAKE_ARGS: more -D options for a fresh tree.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    found = re.search(r"project\(\w+\s+VERSION\s+([0-9.]+)", text)
    if not found:
        sys.exit(f"{ROOT / 'CMakeLists.txt'}: no project(... VERSION x.y.z)")
    return found.group(1)


def cache_value(build, name):
    for line in (build / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split("=", 1)[1]
    return ""


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        given = os.environ.get("ARYL_BUILD_DIR")
        build = Path(given).resolve() if given else Path(self.build_temp).resolve() / "cmake"
        if given and not (build / "CMakeCache.txt").exists():
            sys.exit(f"ARYL_BUILD_DIR={given}: not a configured build tree (no CMakeCache.txt)")
        if not (build / "CMakeCache.txt").exists():
            cmd = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                   f"-DARYL_PYTHON={sys.executable}", "-DARYL_WITH_PYTHON=ON"]
            if shutil.which("ninja"):
                cmd += ["-G", "Ninja"]
            cmd += shlex.split(os.environ.get("ARYL_CMAKE_ARGS", ""))
            subprocess.run(cmd, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        if subprocess.run(["cmake", "--build", str(build), "--target", "aryl_python", "-j", jobs]).returncode:
            sys.exit(f"cmake --build {build} --target aryl_python failed (no such target: the configure step's "
                     "summary says why the Python module is off, e.g. no pybind11 or no torch for "
                     f"{cache_value(build, 'ARYL_PYTHON')})")
        dest = Path(self.get_ext_fullpath(ext.name))
        built = build / "python" / "aryl" / dest.name
        if not built.exists():
            found = sorted(p.name for p in (build / "python" / "aryl").glob("_aryl*"))
            sys.exit(f"{built} was not built (found {found or 'nothing'}): the build tree's ARYL_PYTHON "
                     f"({cache_value(build, 'ARYL_PYTHON')}) is another Python version than {sys.executable}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, dest)


setup(version=project_version(), ext_modules=[Extension("aryl._aryl", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
