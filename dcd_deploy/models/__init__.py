"""Model zoo: MobileNetV2 and ResNet, each static, DCD, DY-Conv and CondConv."""

from . import mobilenetv2, resnet  # noqa: F401  (registers the entry points)
from ._factory import LayerSpec
from ._images import natural_pixels, natural_uint8, synthetic_images
from ._pseudo_train import pseudo_train, recalibrate_bn
from ._registry import check_input_size, closest_models, create_model, is_model, list_models, register_model
from .mobilenetv2 import MobileNetV2
from .resnet import ResNet

__all__ = [
    "LayerSpec",
    "MobileNetV2",
    "ResNet",
    "check_input_size",
    "closest_models",
    "create_model",
    "is_model",
    "list_models",
    "natural_pixels",
    "natural_uint8",
    "pseudo_train",
    "recalibrate_bn",
    "register_model",
    "synthetic_images",
]
