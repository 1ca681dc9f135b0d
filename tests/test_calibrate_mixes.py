"""The CPU bandwidth mixes (issue 18): streaming.c's results, the bytes each mix counts, and the torch fallback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import torch

from tileops.calibrate import measure
from tileops.ledger import STREAM_WORDS
from tileops.calibrate.streaming import StreamingKernels, find_compiler, load_kernels
from tileops.profiles import MIXES
from cli_support import tileops

TINY = measure.Sizes(array_bytes=1 << 20, mix_reps=2, fma_sizes=(64,), fma_target_s=0.01, big_matmul=64,
                     matmul_reps=1, latency_calls=10)


@pytest.fixture(scope="module")
def kernels() -> StreamingKernels:
    k, why = load_kernels()
    if k is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"streaming.c cannot be built: {why} (CI=true: .ci/run installs gcc)")
        pytest.skip(f"streaming.c cannot be built here: {why}")
    return k


def _guarded(n: int, offset: int, fill: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A view of ``n`` floats starting ``offset`` elements into a buffer with guard elements either side."""
    buf = torch.full((n + offset + 64,), fill)
    return buf, buf[offset:offset + n]


@pytest.mark.parametrize("n,offset,threads", [(10_003, 1, 2), (10_003, 0, 1), (37, 3, 2), (5, 0, 3)])
def test_streaming_kernels_equal_the_reference(kernels: StreamingKernels, n: int, offset: int, threads: int) -> None:
    """Every mix, on lengths and offsets that exercise the unaligned head, the vector body and the tail,
    over several thread spans; nothing outside the view is written."""
    gen = torch.Generator().manual_seed(0)
    abuf, a = _guarded(n, offset, -1.0)
    b = torch.randn(n + 5, generator=gen)[2:2 + n].contiguous()  # its own alignment, not a's
    c = torch.randn(n, generator=gen)

    kernels.run("copy", a, b, c, reps=1, threads=threads)
    assert torch.equal(a, b)
    kernels.run("triad", a, b, c, reps=1, threads=threads)
    torch.testing.assert_close(a, b + 3.0 * c, rtol=1e-6, atol=1e-6)
    _, total = kernels.run("read", a, b, c, reps=1, threads=threads)
    assert total == pytest.approx(float(b.double().sum()), rel=1e-5, abs=1e-3)
    kernels.run("write", a, b, c, reps=1, threads=threads)
    assert torch.equal(a, torch.full_like(a, 3.0))
    kernels.touch(a, 7.0, threads)
    assert torch.equal(a, torch.full_like(a, 7.0))
    guard = torch.cat([abuf[:offset], abuf[offset + n:]])
    assert torch.equal(guard, torch.full_like(guard, -1.0))  # the head peel and the tail stay inside the view


def test_streaming_kernels_refuse_what_they_cannot_stream(kernels: StreamingKernels) -> None:
    x = torch.zeros(16)
    with pytest.raises(ValueError, match="float32"):
        kernels.run("copy", x.double(), x, x, reps=1, threads=1)
    with pytest.raises(ValueError, match="contiguous"):
        kernels.run("copy", torch.zeros(32)[::2], x, x, reps=1, threads=1)
    with pytest.raises(ValueError, match="same length"):
        kernels.run("copy", x, torch.zeros(8), x, reps=1, threads=1)


def _check_accounting(mixes: dict[str, measure.MixMeasurement]) -> None:
    assert list(mixes) == list(MIXES)
    for mix, m in mixes.items():
        assert m.array_bytes == TINY.array_bytes
        assert m.bytes == STREAM_WORDS[mix] * TINY.array_bytes  # STREAM counting: no write-allocate word
        assert m.bytes_per_s == pytest.approx(m.bytes / m.best_s)
        assert m.reps == TINY.mix_reps


def test_streaming_mixes_count_bytes_as_stream(kernels: StreamingKernels) -> None:
    assert STREAM_WORDS == {"copy": 2, "triad": 3, "read": 1, "write": 1}
    mixes = measure.streaming_mixes(kernels, TINY, threads=2)
    _check_accounting(mixes)
    for mix in ("copy", "triad", "write"):  # the stores that make STREAM's count the hardware's traffic
        assert mixes[mix].kernel.endswith(f"[streaming.c: {kernels.stores}, 2 OpenMP threads, {kernels.compiler} "
                                          + " ".join(kernels.flags) + "]")
    assert mixes["read"].kernel.startswith("sum of b[i] [streaming.c")


def test_measure_mixes_uses_streaming_c_on_a_cpu(kernels: StreamingKernels) -> None:
    mixes, notes = measure.measure_mixes(torch.device("cpu"), TINY)
    assert not notes and all("streaming.c" in m.kernel for m in mixes.values())


def test_without_a_compiler_the_torch_mixes_run_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no compiler on it
    monkeypatch.delenv("CC", raising=False)
    assert find_compiler() == (None, "no C compiler (cc, gcc or clang) on PATH and CC is not set")
    mixes, notes = measure.measure_mixes(torch.device("cpu"), TINY)
    _check_accounting(mixes)
    assert mixes["copy"].kernel == "a.copy_(b)" and mixes["triad"].kernel.startswith("torch.add")
    (note,) = notes
    assert "torch's kernels" in note and "no C compiler" in note and "apt-get install gcc" in note


def _fake_compiler(tmp_path: Path) -> Path:
    cc = tmp_path / "broken-cc"
    cc.write_text("#!/bin/sh\necho 'fatal error: omp.h: No such file or directory' >&2\nexit 1\n")
    cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    return cc


def test_a_compiler_that_fails_names_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(_fake_compiler(tmp_path)))
    k, why = load_kernels()
    assert k is None
    assert "broken-cc could not build streaming.c with OpenMP" in why and "omp.h" in why
    monkeypatch.setenv("CC", "no-such-cc")
    assert load_kernels() == (None, "CC='no-such-cc' is not an executable on PATH")


@pytest.mark.slow
def test_calibrate_without_a_compiler_says_so(tmp_path: Path) -> None:
    """`tileops calibrate` end to end with a compiler that fails: torch mixes, and the warning in its output."""
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(tmp_path / "store"), "CC": str(_fake_compiler(tmp_path))}
    proc = tileops("calibrate", "--device", "cpu", "--quick",
                   "--no-write", "--format", "json", environ=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert any("torch's kernels" in w and "omp.h" in w for w in doc["warnings"]), doc["warnings"]


def test_a_kernel_loads_from_memory_where_tmp_is_noexec(tmp_path: Path) -> None:
    """The path a container's noexec tmpfs /tmp takes: two libraries loaded from memory stay distinct."""
    from tileops.calibrate.streaming import load_from_memory

    cc, why = find_compiler()
    if cc is None:
        pytest.skip(why)
    libs = []
    for i in (1, 2):
        src = tmp_path / f"v{i}.c"
        src.write_text(f"int which(void) {{ return {i}; }}\n")
        so = tmp_path / f"v{i}.so"
        subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(so)], check=True, timeout=120)
        libs.append(load_from_memory(so))
    assert [lib.which() for lib in libs] == [1, 2]
