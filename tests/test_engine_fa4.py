"""FA4 prefill capability guard, without a GPU: capability and the flash-attn-4 import are mocked."""
import warnings
from unittest import mock

import pytest
import torch

from rollout_bench.engine import fa4


def resolve(setting, major, importable=True, cuda=True):
    with mock.patch.object(torch.cuda, "is_available", return_value=cuda), \
            mock.patch.object(torch.cuda, "get_device_capability", return_value=(major, 0)), \
            mock.patch.object(fa4, "importable", return_value=importable), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opts, q_block = fa4.prefill_options(setting, "cuda", {"PRESCALE_QK": True})
    return opts, q_block, [w for w in caught if issubclass(w.category, RuntimeWarning) and "fa4" in str(w.message)]


@pytest.mark.parametrize("major", [9, 10, 12])
@pytest.mark.parametrize("setting", ["auto", "on"])
def test_enabled_on_hopper_and_blackwell(setting, major):
    opts, q_block, warned = resolve(setting, major)
    assert opts == {"PRESCALE_QK": True, "BACKEND": "FLASH"} and q_block == fa4.FA4_Q_BLOCK and not warned


@pytest.mark.parametrize("major, importable, cuda, why", [
    (8, True, True, "compute capability 8.0 < 9.0"), (9, False, True, "flash-attn-4 is not installed"),
    (9, True, False, "no CUDA device")])
def test_explicit_on_that_cannot_run_fa4_raises_with_the_reason(major, importable, cuda, why):
    """'on' asks that FA4 be measured: a silent (or warned) Triton prefill would be timed under its name."""
    with pytest.raises(fa4.Unavailable, match=why) as e:
        resolve("on", major, importable, cuda)
    assert why in e.value.why and "fa4_prefill" in str(e.value) and "'auto'" in str(e.value)


@pytest.mark.parametrize("major, importable, cuda", [(8, True, True), (9, False, True), (9, True, False)])
def test_auto_falls_back_silently(major, importable, cuda):
    opts, q_block, warned = resolve("auto", major, importable, cuda)
    assert "BACKEND" not in opts and q_block == fa4.TRITON_Q_BLOCK and not warned


def test_off_stays_off_on_supported_gpu():
    opts, _, warned = resolve("off", 10)
    assert "BACKEND" not in opts and not warned


def test_cpu_device_never_uses_fa4():
    assert fa4.unsupported("cpu") == "no CUDA device"
    assert not fa4.use_fa4("auto", "cpu")
    with pytest.raises(fa4.Unavailable, match="no CUDA device"):
        fa4.use_fa4("on", "cpu")
