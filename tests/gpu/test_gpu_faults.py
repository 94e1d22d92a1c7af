"""A real CUDA error inside the GPU preprocess instance: it must not keep failing silently.

The fault-injection action ``cuda-illegal-address`` launches a kernel that writes through a
wild pointer, which poisons the stub's CUDA context (cudaErrorIllegalAddress, sticky). The
GPU executor must turn the error it then meets into InstanceFailed: the request gets an
error naming the CUDA error, the stub leaves, the supervisor restarts the server, and
requests succeed again.
"""

from __future__ import annotations

import importlib.util

import pytest

from tritonprep_testkit.faults import OUTAGE_ANSWERS, break_and_recover, quick_settings


@pytest.fixture
def gpu_faults(cp, nvimgcodec):
    if importlib.util.find_spec("pytriton") is None:
        pytest.skip("the embedded server (nvidia-pytriton) is not installed here")


def test_illegal_address_takes_the_instance_out_and_the_server_restarts(gpu_faults, tmp_path):
    figures = break_and_recover("cuda-illegal-address", quick_settings("cuda-illegal-address"), tmp_path)
    print(figures)  # noqa: T201 - the figures go into the GPU test report
    assert figures["trigger_request"] == "instance-failed", figures
    assert "CUDA error" in figures["trigger_message"] and "illegal" in figures["trigger_message"].lower(), figures
    assert figures["restarts"] == 1 and figures["ready_at_end"], figures
    assert figures["client_threads_hung"] == 0
    assert figures["requests_succeed_again_after_s"] is not None and figures["requests_succeed_again_after_s"] < 90
    assert set(figures["after_recovery"]) == {"ok"}, figures
    assert set(figures["during_outage"]) <= OUTAGE_ANSWERS, figures
