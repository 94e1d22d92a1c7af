"""classify_fused leaves the executor's work unawaited only where its network runs on the executor's stream."""

from types import SimpleNamespace

from tritonprep.pipeline.fused import shares_stream


def test_the_network_on_the_executors_stream_shares_it():
    stream = object()
    assert shares_stream(SimpleNamespace(stream=stream), SimpleNamespace(stream=stream))


def test_a_runtime_on_a_stream_of_its_own_does_not():
    """TensorRT's runtime owns its stream: the executor must wait before the network reads the pixels."""
    assert not shares_stream(SimpleNamespace(stream=object()), SimpleNamespace(stream=object()))


def test_cpu_executors_and_runtimes_have_no_stream_to_share():
    cpu = SimpleNamespace()
    assert not shares_stream(cpu, cpu)
    assert not shares_stream(SimpleNamespace(stream=None), SimpleNamespace(stream=None))
    assert not shares_stream(SimpleNamespace(stream=object()), cpu)
    assert not shares_stream(cpu, SimpleNamespace(stream=object()))
