"""Measure a model's forward GFLOPs and parameter count with Ultralytics itself.

Run as a subprocess (`python -m training.flops yolo11n.yaml 640`), never imported by the web
process: it imports torch and Ultralytics (~2.3 s, ~900 MB). Prints one JSON object.
"""

import json
import sys


def measure(yaml_name: str, imgsz: int) -> dict:
    from ultralytics import YOLO
    from ultralytics.utils.torch_utils import get_flops, get_num_params

    model = YOLO(yaml_name, verbose=False).model
    return {
        "yaml": yaml_name,
        "imgsz": imgsz,
        "gflops": round(float(get_flops(model, imgsz)), 4),
        "params": int(get_num_params(model)),
    }


if __name__ == "__main__":
    name, size = sys.argv[1], int(sys.argv[2])
    result = measure(name, size)
    sys.stdout.write(json.dumps(result) + "\n")
