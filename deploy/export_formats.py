"""The catalog of export formats: every format Ultralytics knows, which of them this server
offers (their packages are installed, at the versions Ultralytics pins) and why the others are
not. Read from installed packages' metadata only, so web processes can show it without torch."""

from dataclasses import dataclass
from functools import cache
from importlib import metadata

from packaging.requirements import Requirement


@dataclass(frozen=True)
class ExportFormat:
    key: str  # Ultralytics' `format=` argument
    label: str
    suffix: str  # what Ultralytics writes: a file's suffix, or the end of a folder's name
    is_folder: bool = False
    runs_on: str = ""
    # Distributions (with Ultralytics' own version pins) the export needs installed. With
    # YOLO_AUTOINSTALL=0 Ultralytics never installs one itself.
    requires: tuple[str, ...] = ()
    blocked: str = ""  # why it is never offered here, whatever is installed


@dataclass(frozen=True)
class FormatAvailability:
    format: ExportFormat
    available: bool
    reason: str = ""

    @property
    def key(self) -> str:
        return self.format.key


FORMATS = (
    ExportFormat(
        "onnx",
        "ONNX",
        ".onnx",
        runs_on="ONNX Runtime, OpenCV DNN, TensorRT; Kestrel's inference API",
        requires=("onnx>=1.12.0,<2.0.0", "onnxslim>=0.1.82", "onnxruntime>=1.20.0"),
    ),
    ExportFormat(
        "torchscript",
        "TorchScript",
        ".torchscript",
        runs_on="LibTorch (C++) and PyTorch, without Ultralytics",
        requires=("torch",),
    ),
    ExportFormat(
        "openvino",
        "OpenVINO",
        "_openvino_model",
        is_folder=True,
        runs_on="Intel CPUs, GPUs and NPUs",
        requires=("openvino>=2024.0.0",),
    ),
    ExportFormat(
        "ncnn",
        "NCNN",
        "_ncnn_model",
        is_folder=True,
        runs_on="phones and ARM boards",
        # PNNX is a pip package that ships its converter (nothing is downloaded at export).
        requires=("ncnn", "pnnx==20260526"),
    ),
    ExportFormat(
        "paddle",
        "PaddlePaddle",
        "_paddle_model",
        is_folder=True,
        runs_on="Paddle Inference",
        requires=("paddlepaddle>=3.0.0,<3.3.0", "x2paddle"),
    ),
    ExportFormat(
        "engine",
        "TensorRT",
        ".engine",
        blocked="needs an NVIDIA GPU with NVIDIA's TensorRT at export time, on the machine that "
        "will run it; exports here run on CPU",
    ),
    ExportFormat(
        "coreml",
        "Core ML",
        ".mlpackage",
        blocked="coremltools requires numpy 2.3.5 or older, while torch and Ultralytics here run "
        "numpy {numpy}; Core ML models run only on Apple devices",
    ),
    ExportFormat(
        "coreai",
        "Core AI",
        ".aimodel",
        blocked="Apple's coreai-torch converter is not installed here; the models run only on "
        "Apple devices",
    ),
    ExportFormat(
        "saved_model",
        "TensorFlow SavedModel",
        "_saved_model",
        is_folder=True,
        blocked="needs TensorFlow 2.19 or older with numpy 1.x and protobuf 4-5 (Ultralytics "
        "builds it in a Python 3.12 environment of its own); it cannot share this server's "
        "numpy 2 and protobuf 7",
    ),
    ExportFormat(
        "pb",
        "TensorFlow GraphDef",
        ".pb",
        blocked="made from a TensorFlow SavedModel, which is not available here (TensorFlow "
        "needs numpy 1.x and protobuf 4-5)",
    ),
    ExportFormat(
        "edgetpu",
        "TensorFlow Edge TPU",
        "_edgetpu.tflite",
        blocked="needs TensorFlow (not available here) and Google's Edge TPU compiler, which is "
        "installed from Google's apt repository",
    ),
    ExportFormat(
        "litert",
        "LiteRT (TFLite)",
        ".tflite",
        blocked="litert-torch brings JAX, transformers and torchao (over a gigabyte) into the "
        "server's environment; not installed here",
    ),
    ExportFormat(
        "mnn",
        "MNN",
        ".mnn",
        blocked="MNN's converter runs `pip install` and sends usage logs to Alibaba Cloud when it "
        "is imported; Kestrel runs offline and never installs packages at run time",
    ),
    ExportFormat(
        "executorch",
        "ExecuTorch",
        "_executorch_model",
        is_folder=True,
        blocked="executorch requires numpy 2.3.5 or older (torch and Ultralytics here run numpy "
        "{numpy}); not installed here",
    ),
    ExportFormat(
        "imx",
        "Sony IMX500",
        "_imx_model",
        is_folder=True,
        blocked="Sony's model compression toolkit needs torch older than 2.12 (this server runs "
        "torch {torch})",
    ),
    ExportFormat(
        "rknn",
        "Rockchip RKNN",
        "_rknn_model",
        is_folder=True,
        blocked="rknn-toolkit2 needs torch 2.4 (this server runs torch {torch})",
    ),
    ExportFormat(
        "axelera",
        "Axelera AI",
        "_axelera_model",
        is_folder=True,
        blocked="Axelera's SDK comes from Axelera's own package index; not installed here",
    ),
    ExportFormat(
        "deepx",
        "DEEPX",
        "_deepx_model",
        is_folder=True,
        blocked="DEEPX's dx_com compiler needs torch older than 2.12 and numpy 1.x",
    ),
    ExportFormat(
        "qnn",
        "Qualcomm QNN",
        "_qnn.onnx",
        blocked="needs Qualcomm's onnxruntime-qnn build, for Snapdragon devices; not installed",
    ),
    ExportFormat(
        "hailo",
        "Hailo",
        "_hailo_model",
        is_folder=True,
        blocked="needs Hailo's Dataflow Compiler, a download from Hailo's developer zone",
    ),
    ExportFormat(
        "ascend",
        "Huawei Ascend",
        "_ascend_model",
        is_folder=True,
        blocked="needs Huawei's CANN toolkit and an Ascend NPU",
    ),
    ExportFormat(
        "xilinx",
        "AMD Xilinx",
        "_xilinx_model",
        is_folder=True,
        blocked="needs AMD Quark in an environment of its own (Python 3.12); not installed here",
    ),
)
FORMATS_BY_KEY = {f.key: f for f in FORMATS}


@cache
def _requirement_problem(spec: str) -> str:
    """Why an installed distribution does not meet `spec`, or "" when it does. Read from the
    installed packages' metadata: nothing is imported (this runs in web processes too)."""
    requirement = Requirement(spec)
    try:
        version = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        return f"{requirement.name} is not installed on this server"
    if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
        return f"needs {spec}, but {requirement.name} {version} is installed"
    return ""


def _installed_version(name: str) -> str:
    try:
        return metadata.version(name).split("+")[0]
    except metadata.PackageNotFoundError:
        return "none"


@cache
def format_catalog() -> tuple[FormatAvailability, ...]:
    """Every format Ultralytics knows, available ones first, each with why it is not when not.
    Worked out once per process: installed packages do not change under a running server."""
    entries = []
    for fmt in FORMATS:
        if fmt.blocked:
            installed = {name: _installed_version(name) for name in ("torch", "numpy")}
            entries.append(FormatAvailability(fmt, False, fmt.blocked.format(**installed)))
            continue
        problems = [p for p in map(_requirement_problem, fmt.requires) if p]
        entries.append(FormatAvailability(fmt, not problems, "; ".join(problems)))
    return tuple(sorted(entries, key=lambda e: not e.available))


def format_availability(key: str) -> FormatAvailability | None:
    return next((e for e in format_catalog() if e.key == key), None)
