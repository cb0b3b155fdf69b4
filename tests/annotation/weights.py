"""A real Ultralytics model that is sure of itself: built from yolo11n.yaml (nothing can be
downloaded here) with its class-0 score biased up, so every image gets confident boxes of
class 0 and nothing else. Its predictions are computed by Ultralytics like any model's."""

from pathlib import Path


def confident_weights_save(path: Path) -> Path:
    from annotation.assist import predict

    predict._ultralytics_env()  # offline, before the first import
    import torch
    from ultralytics import YOLO

    torch.manual_seed(0)
    yolo = YOLO("yolo11n.yaml")
    head = yolo.model.model[-1]
    with torch.no_grad():
        for branch in head.cv3:  # per scale: the class scores' last convolution
            last = branch[-1]
            last.bias.fill_(-12.0)
            last.bias[0] = 12.0
    yolo.save(path)
    return path
