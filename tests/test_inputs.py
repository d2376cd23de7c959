"""load_inputs: the user's images from .npy / .pt, checked before they are used."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dcd_deploy.errors import UnsupportedInputError
from dcd_deploy.inputs import MAX_IMAGES, load_inputs


def test_npy_and_pt_of_any_float_dtype_load_as_float32(tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 8))
    for dtype in (np.float16, np.float32, np.float64):
        np.save(tmp_path / "x.npy", x.astype(dtype))
        got = load_inputs(tmp_path / "x.npy", input_size=8)
        assert got.dtype == torch.float32 and got.shape == (3, 3, 8, 8)
        assert np.allclose(got.numpy(), x.astype(dtype).astype(np.float32))
    torch.save(torch.from_numpy(x), tmp_path / "x.pt")
    assert torch.equal(load_inputs(tmp_path / "x.pt"), torch.from_numpy(x).float())


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda p: torch.save({"x": torch.zeros(1, 3, 8, 8)}, p.with_suffix(".pt")), "holds a dict, not one tensor"),
        (lambda p: p.with_suffix(".pt").write_bytes(b"garbage"), "cannot read inputs file"),
        (lambda p: np.save(p.with_suffix(".npy"), np.zeros((0, 3, 8, 8), np.float32)), "empty tensor"),
        (lambda p: np.save(p.with_suffix(".npy"), np.zeros((1, 3, 8, 8), complex)), "expected floating-point"),
        (lambda p: p.with_suffix(".txt").write_text("1 2 3"), "expected a .npy or .pt file"),
    ],
)
def test_what_is_not_a_batch_of_images_is_refused(tmp_path, write, message):
    write(tmp_path / "in")
    path = next(tmp_path.iterdir())
    with pytest.raises(UnsupportedInputError, match=message):
        load_inputs(path)


def test_object_arrays_are_never_unpickled(tmp_path):
    np.save(tmp_path / "o.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(UnsupportedInputError, match="not a readable NumPy"):
        load_inputs(tmp_path / "o.npy")


def test_image_count_is_bounded_before_reading(tmp_path):
    # a header claiming MAX_IMAGES + 1 images; memory-mapped, so nothing is allocated
    arr = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.float32, shape=(MAX_IMAGES + 1, 3, 1, 1))
    del arr
    with pytest.raises(UnsupportedInputError, match=f"at most {MAX_IMAGES}"):
        load_inputs(tmp_path / "big.npy")


def test_directory_is_not_an_inputs_file(tmp_path):
    with pytest.raises(UnsupportedInputError, match="is not a regular file"):
        load_inputs(tmp_path)


def test_images_of_other_channel_counts(tmp_path):
    from dcd_deploy.inputs import load_images

    grey = np.random.default_rng(1).normal(size=(2, 8, 10, 1)).astype(np.float32)
    np.save(tmp_path / "g.npy", grey)
    images, described = load_images(tmp_path / "g.npy", input_size=(8, 10), channels=1)
    assert torch.equal(images, torch.from_numpy(grey).permute(0, 3, 1, 2)) and "NHWC" in described
    np.save(tmp_path / "u.npy", (grey * 0 + 7).astype(np.uint8))
    with pytest.raises(UnsupportedInputError, match="preprocessing presets describe 3-channel images"):
        load_images(tmp_path / "u.npy", channels=1)
    with pytest.raises(UnsupportedInputError, match="expected N x 3 x H x W or N x H x W x 3"):
        load_images(tmp_path / "g.npy")  # a grey batch for an RGB model
