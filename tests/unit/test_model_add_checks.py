"""`tritonprep model add`'s checks: every problem is one line saying what to do, all are reported at once, the exit
code is 2 and nothing is written. The networks are tiny ONNX graphs of the signature each case needs
(tritonprep_testkit.onnx_graphs), read by ONNX Runtime as the command reads a real one."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from tritonprep.repository.checks import Request, check_input, check_output, plan
from tritonprep.repository.cli import run
from tritonprep.repository.errors import ModelAddError
from tritonprep.repository.onnx_io import Tensor
from tritonprep.spec import OutputSpec
from tritonprep_testkit.onnx_graphs import network

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A copy of the shipped repository without its ONNX files."""
    dest = tmp_path / "models"
    shutil.copytree(
        ROOT / "model_repository", dest, symlinks=True, ignore=shutil.ignore_patterns("*.onnx", "*.json", "__pycache__")
    )
    return dest


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def problems(request: Request) -> list[str]:
    with pytest.raises(ModelAddError) as e:
        plan(request)
    return list(e.value.problems)


def one_problem(request: Request) -> str:
    found = problems(request)
    assert len(found) == 1, found
    return found[0]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


# ----------------------------------------------------------------------------------------------- the name
@pytest.mark.parametrize("name", ["Lite2", "2net", "my net", "a.b", "x" * 49, ""])
def test_a_name_that_cannot_name_a_model_is_refused(repository, tmp_path, name):
    assert "use lowercase letters, digits" in one_problem(Request(name, network(tmp_path / "n.onnx"), repository))


@pytest.mark.parametrize("taken", ["mine", "mine_network", "mine_postprocess"])
def test_a_name_whose_models_exist_is_refused(repository, tmp_path, taken):
    (repository / taken).mkdir()
    message = one_problem(Request("mine", network(tmp_path / "n.onnx"), repository))
    assert message == f"'{taken}' is already a model of {repository}; pick another NAME or remove {repository / taken}"


def test_a_name_whose_preprocess_output_exists_is_refused(repository, tmp_path):
    config = repository / "preprocess" / "config.pbtxt"
    config.write_text(config.read_text() + 'output { name: "MINE_PIXELS" data_type: TYPE_FP32 dims: [3, 224, 224] }\n')
    message = one_problem(Request("mine", network(tmp_path / "n.onnx"), repository))
    assert message.startswith("preprocess already has an output 'MINE_PIXELS'")


def test_a_folder_that_is_not_a_repository_is_refused(tmp_path):
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "notes.txt").write_text("not models")
    assert "not a tritonprep model repository" in one_problem(Request("x", network(tmp_path / "n.onnx"), folder))


# ----------------------------------------------------------------------------------------------- --set
@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["output_size"], "--set 'output_size': write KEY=VALUE"),
        (["=3"], "--set '=3': write KEY=VALUE"),
        (["colour=red"], "--set colour: no such preprocess parameter; a network's own are preset, output_size"),
        (["max_pixels=100"], "--set max_pixels: is set once for the whole preprocess model"),
        (["executor=cpu"], "--set executor: is set once for the whole preprocess model"),
        (["mean=1", "mean=2"], "--set mean is given twice"),
        (["output_size=abc"], "--set: parameter 'output_size' must be an integer, got 'abc'"),
        (["output_size=1,2,3"], "--set: parameter 'output_size' must be 2 comma-separated integers, got '1,2,3'"),
        (["resize=squash"], "--set: resize must be one of shorter_side_crop, letterbox, stretch; got 'squash'"),
        (["std=0"], "--set: std values must be non-zero"),
        (["output_size=260,260"], "--set: resize_shorter (256) must be >= the output size (260x260)"),
    ],
)
def test_a_bad_set_is_refused_with_what_to_write(repository, tmp_path, sets, expected):
    request = Request("mine", network(tmp_path / "n.onnx"), repository, sets=tuple(sets))
    assert one_problem(request).startswith(expected)


def test_set_takes_the_documented_names_and_units(repository, tmp_path):
    onnx = network(tmp_path / "n.onnx", ("batch", 240, 240, 3))
    sets = ("output_size=240,240", "resize_shorter=274", "mean=127,127,127", "layout=NHWC", "interpolation=bicubic")
    chosen = plan(Request("mine", onnx, repository, sets=sets))
    spec = chosen.network.spec
    assert (spec.output_shape, spec.resize_shorter, spec.interpolation) == ((240, 240, 3), 274, "bicubic")
    assert chosen.spec_parameters["output_size"] == "240,240" and chosen.spec_parameters["mean"] == "127,127,127"
    preset = plan(
        Request("det", network(tmp_path / "d.onnx", ("batch", 3, 640, 640)), repository, sets=("preset=ultralytics",))
    )
    assert (preset.network.spec.resize, preset.spec_parameters["pad_value"]) == ("letterbox", "114")  # fmt: skip


# ----------------------------------------------------------------------------------------------- the ONNX input
@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"input_shape": ("batch", 3, 260, 260)}, "it takes 260x260 images but the preprocess output is 224x224: "
         "add --set output_size=260,260 and --set resize_shorter=N with N >= 260 (e.g. 292: TF's crop padding)"),
        ({"input_shape": ("batch", 3, 200, 200)}, "it takes 200x200 images but the preprocess output is 224x224: "
         "add --set output_size=200,200"),
        ({"input_shape": ("batch", 224, 224, 3)}, "NHWC, but the preprocess output is NCHW [3, 224, 224]: "
         "add --set layout=NHWC"),
        ({"input_shape": (1, 3, 224, 224)}, "its batch axis is fixed at 1; export it with a dynamic batch axis"),
        ({"input_element": "float16"}, "of float16; the network runtimes feed FP32 (float32): export FP32 input"),
        ({"input_element": "uint8"}, "of uint8; the network runtimes feed FP32"),
        ({"input_shape": ("batch", 1, 28, 28)}, "it has no axis of 3 channels (axis 1 or 3)"),
        ({"input_shape": ("batch", 3, 224)}, "an image network takes 4 axes"),
        ({"extra_inputs": 1}, "the network has 2 inputs ('input', 'extra0'); tritonprep feeds one image tensor"),
    ],
)  # fmt: skip
def test_the_onnx_input_is_checked_against_the_preprocess_output(repository, tmp_path, graph, expected):
    message = one_problem(Request("mine", network(tmp_path / "n.onnx", **graph), repository))
    assert expected in message, message


def test_the_preprocess_dtype_must_be_what_the_network_takes(repository, tmp_path):
    message = one_problem(Request("mine", network(tmp_path / "n.onnx"), repository, sets=("dtype=FP16",)))
    assert message.endswith("of float32 but the preprocess output is FP16: drop --set dtype=FP16")


def test_a_network_of_any_size_takes_the_preprocess_outputs(repository, tmp_path):
    onnx = network(tmp_path / "n.onnx", ("batch", 3, "height", "width"), 5)
    chosen = plan(Request("mine", onnx, repository, sets=("output_size=320,320", "resize_shorter=320")))
    assert chosen.network.spec.output_shape == (3, 320, 320)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (Tensor("y", ("batch", 10, 2), "tensor(float)"), "output 'y' is [batch, 10, 2]; a classifier answers 2 axes"),
        (Tensor("y", ("batch", "classes"), "tensor(float)"), "its classes axis has no fixed size"),
        (Tensor("y", ("batch", None), "tensor(float)"), "is [batch, ?]: its classes axis has no fixed size"),
        (Tensor("y", ("batch", 10), "tensor(int64)"), "of int64; the network runtimes read FP32"),
    ],
)  # fmt: skip
def test_the_onnx_output_must_be_a_row_of_floats_per_image(output, expected):
    width, found = check_output([output], "classifier")
    assert len(found) == 1 and expected in found[0], found


def test_the_output_checks_name_an_embedders_width_and_real_files_are_read(repository, tmp_path):
    _, found = check_output([Tensor("e", ("batch", "d"), "tensor(float)")], "embedder")
    assert "its D axis has no fixed size" in found[0]
    assert "a classifier answers 2 axes" in one_problem(
        Request("mine", network(tmp_path / "n.onnx", width=20, output_shape=("batch", 10, 2)), repository)
    )
    assert "of int64" in one_problem(Request("mine", network(tmp_path / "i.onnx", output_element="int64"), repository))
    assert check_input([Tensor("x", ("n", 3, 224, 224), "tensor(float)")], OutputSpec()) == []


def test_an_onnx_file_that_is_missing_or_not_onnx_is_one_line(repository, tmp_path):
    missing = tmp_path / "missing.onnx"
    assert one_problem(Request("mine", missing, repository)) == f"--onnx {missing}: no such file"
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf")
    message = one_problem(Request("mine", junk, repository))
    assert message.startswith(f"--onnx {junk}: ONNX Runtime cannot load it (") and "\n" not in message


# ----------------------------------------------------------------------------------------------- labels, top-k
def test_labels_must_name_every_class(repository, tmp_path):
    onnx = network(tmp_path / "n.onnx", width=3)
    names = tmp_path / "names.txt"
    names.write_text("cat\ndog\n")
    assert one_problem(Request("mine", onnx, repository, labels=str(names))) == (
        f"--labels {names}: labels {names} hold 2 names but the network has 3 classes; give one name per class, "
        "in class order"
    )
    assert "hold 1000 names but the network has 3 classes" in one_problem(
        Request("mine", onnx, repository, labels="imagenet")
    )
    names.write_text("cat\n\ndog\n")
    assert "line 2 is empty; give every class a name" in one_problem(
        Request("mine", onnx, repository, labels=str(names))
    )
    assert "does not exist" in one_problem(Request("mine", onnx, repository, labels=str(tmp_path / "none.txt")))
    names.write_text("cat\ndog\nbird\n\n")  # trailing empty lines are no classes
    assert plan(Request("mine", onnx, repository, labels=str(names))).labels_file == names


@pytest.mark.parametrize("top_k", [0, 13])
def test_top_k_is_at_most_the_classes(repository, tmp_path, top_k):
    message = one_problem(Request("mine", network(tmp_path / "n.onnx", width=12), repository, top_k=top_k))
    assert message == f"--top-k {top_k}: the network has 12 classes; give 1..12"


def test_top_k_defaults_to_five_or_the_classes_and_an_embedder_takes_neither(repository, tmp_path):
    assert plan(Request("a", network(tmp_path / "a.onnx", width=12), repository)).network.top_k == 5
    assert plan(Request("b", network(tmp_path / "b.onnx", width=3), repository)).network.top_k == 3
    assert plan(Request("c", network(tmp_path / "c.onnx", width=3), repository, top_k=3)).network.top_k == 3
    message = one_problem(Request("e", network(tmp_path / "e.onnx"), repository, kind="embedder", top_k=3))
    assert message == "--labels and --top-k are a classifier's; an embedder answers one vector per image"


# ----------------------------------------------------------------------------------------------- the command
def test_every_problem_is_reported_at_once_and_nothing_is_written(repository, tmp_path):
    before = snapshot(repository)
    onnx = network(tmp_path / "n.onnx", (1, 224, 224, 3), 3)
    code, out, err = cli("add", "Bad Name", "--onnx", str(onnx), "--top-k", "4", "--set", "max_pixels=1",
                         "--repository", str(repository))  # fmt: skip
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 4, err
    assert all(line.startswith("tritonprep: error: ") for line in lines)
    assert [any(s in line for line in lines) for s in ("NAME 'Bad Name'", "--set max_pixels", "batch axis is fixed",
                                                       "--top-k 4")] == [True] * 4  # fmt: skip
    assert snapshot(repository) == before
    new = tmp_path / "never"
    assert cli("add", "ok", "--onnx", str(tmp_path / "nope.onnx"), "--repository", str(new))[0] == 2
    assert not new.exists() and not list(tmp_path.glob(".never*"))


def test_the_command_adds_the_network_and_says_how_to_serve_and_use_it(repository, tmp_path):
    onnx = network(tmp_path / "n.onnx", ("batch", 3, 240, 240), 7)
    code, out, err = cli("add", "mine", "--onnx", str(onnx), "--top-k", "7", "--set", "output_size=240,240",
                         "--set", "resize_shorter=274", "--repository", str(repository))  # fmt: skip
    assert (code, err) == (0, "")
    assert out.startswith(f"added mine to {repository} in ")
    assert "the top 7 of 7 classes out (labels: the class index)" in out
    assert "+ MINE_PIXELS [3, 240, 240] FP32: shorter side 274, center crop, bilinear, mean 127,127,127" in out
    assert out.splitlines()[-2:] == [f"serve:  tritonprep serve --model-repository {repository}",
                                     "use:    tritonprep classify photo.jpg --model mine"]  # fmt: skip
    assert cli("add", "mine", "--onnx", str(onnx), "--repository", str(repository))[0] == 2  # now taken


def test_the_tritonprep_command_hands_model_to_it(repository, tmp_path):
    from tritonprep_client.cli import run as tritonprep

    out, err = io.StringIO(), io.StringIO()
    code = tritonprep(["model", "add", "mine", "--onnx", str(network(tmp_path / "n.onnx")), "--repository",
                       str(repository)], out, err)  # fmt: skip
    assert code == 0 and "added mine" in out.getvalue()
    with pytest.raises(SystemExit) as e:  # argparse: a usage error is exit code 2, as the other commands'
        tritonprep(["model", "add", "mine"], io.StringIO(), io.StringIO())
    assert e.value.code == 2


def test_a_new_repository_starts_from_the_checkouts_or_the_packaged_one(tmp_path, monkeypatch):
    from tritonprep.repository import paths

    assert paths.shipped_repository() == ROOT / "model_repository"  # a checkout: its own
    monkeypatch.setattr(paths, "_CHECKOUT", tmp_path / "site-packages")  # an installed wheel: no pyproject.toml
    packaged = tmp_path / "site-packages" / "tritonprep" / "model_repository"
    monkeypatch.setattr(paths, "PACKAGED_REPOSITORY", packaged)
    with pytest.raises(ModelAddError, match="no shipped model repository to start a new one from"):
        paths.shipped_repository()
    packaged.mkdir(parents=True)
    assert paths.shipped_repository() == packaged
