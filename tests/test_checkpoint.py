"""Checkpoints: bit-identical round trips, format detection, safe loading, clear errors."""

import argparse
import pickle
import zipfile

import pytest
import torch
from _zoo import ZooCache
from safetensors.torch import save_file
from torch import nn

from dcd_deploy import create_model, load_checkpoint, save_checkpoint
from dcd_deploy.errors import (
    CheckpointError,
    DCDDeployError,
    StateDictMismatchError,
    UnknownModelError,
    UnsafeCheckpointError,
)
from dcd_deploy.models import synthetic_images

SIZE = 64  # MobileNetV2 and static ResNets take any input size


@pytest.fixture(scope="module")
def trained():
    """Pseudo-trained zoo models, built once per module (weights are never modified):
    ``trained(arch, **config)``, each with its own seed, at ``SIZE``."""
    return ZooCache(size=lambda arch: SIZE, seed=None)


def assert_same_model(loaded, model):
    expected, got = model.state_dict(), loaded.state_dict()
    assert list(got) == list(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key
    assert not loaded.training
    x = synthetic_images(2, SIZE, seed=7)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


# -- round trips -------------------------------------------------------------------


@pytest.mark.parametrize(
    "arch, config",
    [
        ("mobilenetv2_050_dcd", {}),
        ("mobilenetv2_100_dcd", {"num_classes": 10, "latent_mult": 0.5}),
        ("mobilenetv2_035_dyconv", {}),
        ("resnet10", {"num_classes": 7}),
    ],
)
def test_round_trip_is_bit_identical(tmp_path, trained, arch, config):
    model = trained(arch, **config)
    path = save_checkpoint(model, tmp_path / "m.pt")
    loaded = load_checkpoint(path)
    assert loaded.arch == arch and loaded.config == config
    assert_same_model(loaded, model)


def test_file_layout(tmp_path):
    model = create_model("mobilenetv2_035_dcd", num_classes=10)
    save_checkpoint(model, tmp_path / "m.pt")
    raw = torch.load(tmp_path / "m.pt", weights_only=True)
    assert {k: raw[k] for k in ("format", "format_version", "arch", "config")} == {
        "format": "dcd-deploy",
        "format_version": 1,
        "arch": "mobilenetv2_035_dcd",
        "config": {"num_classes": 10},
    }
    assert raw["state_dict"].keys() == model.state_dict().keys()


def test_config_with_a_frozenset_round_trips(tmp_path):
    # weights_only loading rebuilds sets but not frozensets; the roles knob is often one.
    model = create_model("mobilenetv2_035_dcd", roles=frozenset({"pw"}))
    loaded = load_checkpoint(save_checkpoint(model, tmp_path / "m.pt"))
    assert loaded.config == {"roles": {"pw"}}
    assert loaded.state_dict().keys() == model.state_dict().keys()


def test_overrides_replace_recorded_config(tmp_path):
    model = create_model("mobilenetv2_035_dcd")
    save_checkpoint(model, tmp_path / "m.pt")
    loaded = load_checkpoint(tmp_path / "m.pt", dropout=0.2)
    assert loaded.config == {"dropout": 0.2}
    with pytest.raises(
        StateDictMismatchError,
        match=r"classifier\.1\.cls\.weight: checkpoint \(1000, 1280\) "
        r"vs model \(10, 1280\)",
    ):
        load_checkpoint(tmp_path / "m.pt", num_classes=10)


# -- saving --------------------------------------------------------------------------


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "m.pt"
    save_checkpoint(create_model("mobilenetv2_035_dcd"), path)
    before = path.read_bytes()

    def torch_save_dies_midway(obj, f):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", torch_save_dies_midway)
    with pytest.raises(CheckpointError, match="cannot write"):
        save_checkpoint(create_model("mobilenetv2_035_dcd", num_classes=10), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]


def test_save_needs_arch(tmp_path):
    with pytest.raises(CheckpointError, match=r"no \.arch.*create_model"):
        save_checkpoint(nn.Linear(2, 2), tmp_path / "m.pt")
    assert not (tmp_path / "m.pt").exists()


def test_save_refuses_config_it_could_not_load_safely(tmp_path):
    model = nn.Linear(2, 2)
    model.arch, model.config = "mobilenetv2_035", {"act": nn.ReLU()}
    with pytest.raises(CheckpointError, match=r"model.config\['act'\] holds a ReLU"):
        save_checkpoint(model, tmp_path / "m.pt")


def test_save_into_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="cannot write"):
        save_checkpoint(create_model("mobilenetv2_035"), tmp_path / "no" / "m.pt")


# -- plain state dicts ---------------------------------------------------------------


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(lambda sd: sd, id="plain"),
        pytest.param(lambda sd: {f"module.{k}": v for k, v in sd.items()}, id="module-prefix"),
        pytest.param(lambda sd: {"state_dict": sd}, id="state_dict-only"),
        # how training code saves what it trained (each as its own docs or scripts write it)
        pytest.param(lambda sd: {f"_orig_mod.{k}": v for k, v in sd.items()}, id="torch.compile"),
        pytest.param(lambda sd: {f"module._orig_mod.{k}": v for k, v in sd.items()}, id="ddp-of-compiled"),
        pytest.param(
            lambda sd: {"epoch": 5, "model_state_dict": sd, "optimizer_state_dict": {"state": {}}, "loss": 0.4},
            id="pytorch-tutorial",
        ),
        pytest.param(
            lambda sd: {
                "model": sd,
                "optimizer": {"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]},
                "lr_scheduler": {"last_epoch": 5},
                "epoch": 5,
                "args": argparse.Namespace(model="mobilenetv2_050_dcd", lr=0.1, data_path="/data/imagenet"),
            },
            id="torchvision-references",
        ),
        pytest.param(
            lambda sd: {
                "epoch": 5,
                "global_step": 900,
                "pytorch-lightning_version": "2.4.0",
                "state_dict": {f"model.{k}": v for k, v in sd.items()},
                "hyper_parameters": {"lr": 0.1},
            },
            id="lightning",
        ),
        pytest.param(lambda sd: {"state_dict": {f"net.backbone.{k}": v for k, v in sd.items()}}, id="two-containers"),
    ],
)
def test_plain_state_dict_with_arch(tmp_path, trained, wrap):
    model = trained("mobilenetv2_050_dcd")
    torch.save(wrap(model.state_dict()), tmp_path / "sd.pt")
    loaded = load_checkpoint(tmp_path / "sd.pt", arch="mobilenetv2_050_dcd")
    assert loaded.arch == "mobilenetv2_050_dcd"
    assert_same_model(loaded, model)


def test_a_container_prefix_is_dropped_only_when_that_makes_the_keys_fit(tmp_path, trained):
    sd = trained("mobilenetv2_050_dcd").state_dict()
    # a second network beside the first (a teacher): the prefix is not shared, nothing dropped
    both = {**{f"model.{k}": v for k, v in sd.items()}, **{f"teacher.{k}": v for k, v in sd.items()}}
    torch.save({"state_dict": both}, tmp_path / "both.pt")
    with pytest.raises(StateDictMismatchError, match=r"unexpected \(model\.features"):
        load_checkpoint(tmp_path / "both.pt", arch="mobilenetv2_050_dcd")
    # a shared prefix over keys that fit better without it, but not all: the mismatch is
    # what is left, and the message says how the keys were read
    torch.save({f"model.{k}": v for k, v in sd.items() if "classifier" not in k}, tmp_path / "part.pt")
    with pytest.raises(StateDictMismatchError) as info:
        load_checkpoint(tmp_path / "part.pt", arch="mobilenetv2_050_dcd")
    cls = [k for k in sd if "classifier" in k and not k.endswith("num_batches_tracked")]  # counters are filled in
    assert str(info.value) == (
        "the checkpoint does not fit mobilenetv2_050_dcd (its keys read without the prefix 'model.' they all "
        f"share): {len(cls)} missing ({', '.join(cls[:3])}, ...)"
    )


def test_a_namespace_holding_code_is_still_refused(tmp_path):
    # argparse.Namespace is rebuilt, but what it holds is checked like everything else
    sd = create_model("mobilenetv2_035_dcd").state_dict()
    torch.save({"model": sd, "args": argparse.Namespace(hook=print)}, tmp_path / "ns.pt")
    with pytest.raises(UnsafeCheckpointError, match=r"references print\)"):
        load_checkpoint(tmp_path / "ns.pt", arch="mobilenetv2_035_dcd")


def test_safetensors_state_dict(tmp_path, trained):
    # timm and Hugging Face save weights so: tensors only, no pickle
    model = trained("mobilenetv2_050_dcd")
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file({f"module.{k}": v for k, v in sd.items()}, tmp_path / "model.safetensors")
    assert_same_model(load_checkpoint(tmp_path / "model.safetensors", arch="mobilenetv2_050_dcd"), model)


def test_state_dict_with_its_arch_needs_no_arch(tmp_path):
    model = create_model("mobilenetv2_035_dcd")
    torch.save({"state_dict": model.state_dict(), "arch": "mobilenetv2_035_dcd"}, tmp_path / "sd.pt")
    assert load_checkpoint(tmp_path / "sd.pt").arch == "mobilenetv2_035_dcd"


def test_plain_state_dict_without_arch(tmp_path):
    torch.save(create_model("mobilenetv2_035").state_dict(), tmp_path / "sd.pt")
    with pytest.raises(CheckpointError, match="--arch") as info:
        load_checkpoint(tmp_path / "sd.pt")
    assert "\n" not in str(info.value)


def test_bn_step_counter_may_be_missing(tmp_path, trained):
    # Files from before PyTorch 0.4.1 have no num_batches_tracked.
    model = trained("mobilenetv2_035")
    sd = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert len(sd) < len(model.state_dict())  # the file really lacks the counters
    torch.save(sd, tmp_path / "sd.pt")
    loaded = load_checkpoint(tmp_path / "sd.pt", arch="mobilenetv2_035")
    # Every weight and statistic the file has arrives unchanged, and the eval-mode model
    # computes what the original does (the counter only matters for momentum=None training).
    got = loaded.state_dict()
    for key, value in sd.items():
        assert torch.equal(got[key], value), key
    assert set(got) == set(model.state_dict())
    x = synthetic_images(2, SIZE, seed=7)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_arch_that_contradicts_the_file(tmp_path):
    save_checkpoint(create_model("mobilenetv2_035_dcd"), tmp_path / "m.pt")
    with pytest.raises(CheckpointError, match="holds a mobilenetv2_035_dcd checkpoint, but arch 'resnet18_dcd'"):
        load_checkpoint(tmp_path / "m.pt", arch="resnet18_dcd")


def test_mismatch_lists_missing_unexpected_and_misshaped_keys(tmp_path):
    sd = create_model("mobilenetv2_035_dcd").state_dict()
    for key in ("features.0.0.weight", "features.0.1.weight", "features.0.1.bias", "features.0.1.running_mean"):
        del sd[key]
    sd["extra.weight"] = torch.zeros(3)
    sd["conv.0.weight"] = torch.zeros(1280, 111, 1, 1)
    sd["classifier.1.cls.bias"] = torch.zeros(10)
    torch.save(sd, tmp_path / "sd.pt")
    with pytest.raises(StateDictMismatchError) as info:
        load_checkpoint(tmp_path / "sd.pt", arch="mobilenetv2_035_dcd")
    msg = str(info.value)
    assert "\n" not in msg
    assert "4 missing (features.0.0.weight, features.0.1.weight, features.0.1.bias, ...)" in msg
    assert "1 unexpected (extra.weight)" in msg
    assert (
        "2 mis-shaped (conv.0.weight: checkpoint (1280, 111, 1, 1) vs model (1280, 112, 1, 1), "
        "classifier.1.cls.bias: checkpoint (10,) vs model (1000,))"
    ) in msg


def test_unknown_arch_suggests_close_names(tmp_path):
    torch.save(create_model("mobilenetv2_035").state_dict(), tmp_path / "sd.pt")
    with pytest.raises(UnknownModelError, match="did you mean.*mobilenetv2_050_dcd") as info:
        load_checkpoint(tmp_path / "sd.pt", arch="mobilenetv2_05_dcd")
    assert isinstance(info.value, DCDDeployError)


def test_newer_format_version_is_refused(tmp_path):
    model = create_model("mobilenetv2_035")
    torch.save(
        {
            "format": "dcd-deploy",
            "format_version": 2,
            "arch": "mobilenetv2_035",
            "config": {},
            "state_dict": model.state_dict(),
        },
        tmp_path / "m.pt",
    )
    with pytest.raises(CheckpointError, match="format version 2.*upgrade"):
        load_checkpoint(tmp_path / "m.pt")


# -- safe loading ----------------------------------------------------------------------


class CreatesFile:
    """Unpickling this opens (creates) a file: stands in for any code a pickle can run."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda obj, p: torch.save(obj, p), id="torch-zip"),
        pytest.param(lambda obj, p: torch.save(obj, p, _use_new_zipfile_serialization=False), id="torch-legacy"),
        pytest.param(lambda obj, p: p.write_bytes(pickle.dumps(obj, protocol=4)), id="pickle"),
    ],
)
def test_code_in_a_pickle_is_never_run(tmp_path, write):
    marker = tmp_path / "marker"
    sd = create_model("mobilenetv2_035").state_dict()
    write({"state_dict": sd, "arch": "mobilenetv2_035", "payload": CreatesFile(marker)}, tmp_path / "evil.pt")
    with pytest.raises(UnsafeCheckpointError, match="--trust-checkpoint") as info:
        load_checkpoint(tmp_path / "evil.pt")
    assert "\n" not in str(info.value)
    assert not marker.exists()


def test_pickled_module_needs_trust(tmp_path, trained):
    model = trained("mobilenetv2_035_dcd")
    torch.save(model, tmp_path / "module.pt")
    with pytest.raises(UnsafeCheckpointError, match="MobileNetV2.*--trust-checkpoint"):
        load_checkpoint(tmp_path / "module.pt")
    with pytest.warns(UserWarning, match="runs any code stored in the file"):
        loaded = load_checkpoint(tmp_path / "module.pt", arch="mobilenetv2_035_dcd", trust_checkpoint=True)
    assert loaded is not model and loaded.arch == "mobilenetv2_035_dcd"
    assert_same_model(loaded, model)


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_torchscript_archive_needs_trust(tmp_path):
    model = create_model("mobilenetv2_035")
    torch.jit.trace(model, torch.zeros(1, 3, 32, 32)).save(str(tmp_path / "ts.pt"))
    with pytest.raises(UnsafeCheckpointError, match="TorchScript.*--trust-checkpoint"):
        load_checkpoint(tmp_path / "ts.pt", arch="mobilenetv2_035")
    with pytest.warns(UserWarning, match="trust_checkpoint=True"):
        loaded = load_checkpoint(tmp_path / "ts.pt", arch="mobilenetv2_035", trust_checkpoint=True)
    expected, got = model.state_dict(), loaded.state_dict()
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


# -- bad files -------------------------------------------------------------------------


def _zip_of_text(path):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("notes/readme.txt", "not a model")


def _zip_with_garbage_pickle(path):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02garbage")
        zf.writestr("archive/version", "3\n")


def _half_of(path, **save_kwargs):
    torch.save(create_model("mobilenetv2_035").state_dict(), path, **save_kwargs)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _half_of_safetensors(path):
    save_file(create_model("mobilenetv2_035").state_dict(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


BAD_FILES = {
    "missing": (lambda p: None, "no such file"),
    "directory": (lambda p: p.mkdir(), "is a directory"),
    "empty": (lambda p: p.write_bytes(b""), "is empty"),
    "truncated": (_half_of, "truncated"),
    "truncated-legacy": (lambda p: _half_of(p, _use_new_zipfile_serialization=False), "damaged or truncated"),
    "text": (lambda p: p.write_text("epoch: 3\nbest_prec1: 71.2\n"), "not a PyTorch checkpoint"),
    "random-bytes": (
        lambda p: p.write_bytes(
            bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(3)).to(torch.uint8).tolist())
        ),
        "",
    ),
    "zip-of-text": (_zip_of_text, "zip archive but not a PyTorch checkpoint"),
    "zip-garbage-pickle": (_zip_with_garbage_pickle, "damaged or truncated"),
    "a-list": (lambda p: torch.save([1, 2, 3], p), "holds a list"),
    "a-dict-of-numbers": (lambda p: torch.save({"epoch": 3, "lr": 0.1}, p), "neither a checkpoint nor"),
    "truncated-safetensors": (lambda p: _half_of_safetensors(p), "damaged safetensors file"),
    "safetensors-of-ints": (
        lambda p: save_file({"w": torch.arange(6).reshape(2, 3)}, p),
        "its state_dict entry w is a int64 tensor",
    ),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_file_gives_one_line_checkpoint_error(tmp_path, kind):
    make, expected = BAD_FILES[kind]
    path = tmp_path / "model.pt"
    make(path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, arch="mobilenetv2_035")
    err = info.value
    assert isinstance(err, DCDDeployError) and not isinstance(err, UnsafeCheckpointError)
    assert expected in str(err)
    assert "\n" not in str(err)


# -- a training checkpoint with an EMA copy beside the weights ------------------------


def _with_ema(tmp_path, trained, key="state_dict", ema_key="state_dict_ema"):
    """timm's train.py layout: the trained weights and their EMA, which differs from them."""
    model = trained("mobilenetv2_050_dcd")
    ema = {k: v + 0.01 if v.is_floating_point() else v for k, v in model.state_dict().items()}
    torch.save({"epoch": 9, key: model.state_dict(), ema_key: ema}, tmp_path / "c.pt")
    return tmp_path / "c.pt", model, ema


def test_the_ema_copy_loads_when_named_and_the_default_warns_that_it_is_there(tmp_path, trained):
    path, model, ema = _with_ema(tmp_path, trained)
    with pytest.warns(UserWarning, match=r"loaded the weights under 'state_dict'; it also holds state_dict_ema"):
        loaded = load_checkpoint(path, arch="mobilenetv2_050_dcd")
    assert_same_model(loaded, model)
    got = load_checkpoint(path, arch="mobilenetv2_050_dcd", weights_key="state_dict_ema").state_dict()
    assert all(torch.equal(got[k], v) for k, v in ema.items())
    with pytest.raises(
        CheckpointError, match=r"c\.pt has no 'ema' \(its weights are under state_dict, state_dict_ema\)"
    ):
        load_checkpoint(path, arch="mobilenetv2_050_dcd", weights_key="ema")
    with pytest.raises(CheckpointError, match=r"its epoch maps|epoch is a int"):
        load_checkpoint(path, arch="mobilenetv2_050_dcd", weights_key="epoch")


def test_one_set_of_weights_loads_without_a_warning(tmp_path, trained, recwarn):
    model = trained("mobilenetv2_050_dcd")
    torch.save(
        {"epoch": 9, "model": model.state_dict(), "optimizer": {"state": {}, "param_groups": []}}, tmp_path / "c.pt"
    )
    assert_same_model(load_checkpoint(tmp_path / "c.pt", arch="mobilenetv2_050_dcd"), model)
    assert not [w for w in recwarn if "also holds" in str(w.message)]
