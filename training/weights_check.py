"""Read a .pt file's pickle without running it, and refuse one that could do harm when loaded.

A PyTorch checkpoint is a zip whose data.pkl names the classes and functions unpickling will
call. A YOLO checkpoint only ever names layers (torch.nn, ultralytics.nn), tensor rebuilders,
storages and a few containers; a hostile file names os.system, builtins.eval, a downloader or an
installer. Every name is checked against an allowlist before torch.load sees the file. Used in
the trainer process only, before Ultralytics loads weights there.
"""

import pickletools
import zipfile
from pathlib import Path

MAX_PICKLE_BYTES = 256 * 1024 * 1024

# Modules whose every name may appear (classes of layers and containers).
_ALLOWED_MODULE_PREFIXES = (
    "torch.nn.modules.",
    "ultralytics.nn.",
)
# Exact (module, name) pairs.
_ALLOWED_NAMES = {
    "torch._utils": {"_rebuild_tensor_v2", "_rebuild_parameter", "_rebuild_parameter_with_state"},
    "torch._tensor": {"_rebuild_from_type_v2"},
    "torch.nn.parameter": {"Parameter"},
    "torch.serialization": {"_get_layout"},
    "torch": {
        "Size",
        "device",
        "dtype",
        "FloatStorage",
        "HalfStorage",
        "BFloat16Storage",
        "DoubleStorage",
        "LongStorage",
        "IntStorage",
        "ShortStorage",
        "CharStorage",
        "ByteStorage",
        "BoolStorage",
        "float32",
        "float16",
        "bfloat16",
        "float64",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "bool",
        "strided",
        "contiguous_format",
        "channels_last",
        "preserve_format",
    },
    # A classifier keeps its preprocessing (torchvision's plain transform classes) with it.
    "torchvision.transforms.functional": {"InterpolationMode"},
    "torchvision.transforms.transforms": {
        "CenterCrop",
        "Compose",
        "Normalize",
        "Resize",
        "ToTensor",
    },
    "collections": {"OrderedDict", "defaultdict"},
    "builtins": {"set", "frozenset", "slice", "complex", "range", "bytearray", "object"},
    "__builtin__": {"set", "frozenset", "slice", "complex", "range", "bytearray", "object"},
    "_codecs": {"encode"},
    "copyreg": {"_reconstructor"},
    "numpy": {"dtype", "ndarray", "float64", "float32", "int64"},
    "numpy.core.multiarray": {"scalar", "_reconstruct"},
    "numpy._core.multiarray": {"scalar", "_reconstruct"},
    "numpy.dtypes": {"Float64DType", "Float32DType", "Int64DType", "Int32DType", "BoolDType"},
    "pathlib": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"},
    "datetime": {"datetime", "date", "timedelta", "timezone"},
    "argparse": {"Namespace"},
    "types": {"SimpleNamespace"},
    "ultralytics.utils": {"IterableSimpleNamespace"},
}
_STRING_OPS = {
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "SHORT_BINSTRING",
    "BINSTRING",
    "STRING",
}


class UnsafeWeights(Exception):
    """The file is not a checkpoint Kestrel will load; the message says why."""


def _allowed(module: str, name: str) -> bool:
    if module.startswith(_ALLOWED_MODULE_PREFIXES):
        return not name.startswith("_") or name in ("__reduce__",)
    return name in _ALLOWED_NAMES.get(module, ())


def pickle_globals(data: bytes) -> set[tuple[str, str]]:
    """Every (module, name) a pickle would import, read from its opcodes, never executed.

    STACK_GLOBAL takes its two names from the stack; they must come straight from the two ops
    before it (string literals or memo reads of strings), as every real checkpoint writes
    them. Names built any other way cannot be read, and the file is refused.
    """
    found: set[tuple[str, str]] = set()
    recent: list[str | None] = []  # what the last ops pushed: a string, or None for anything else
    memo: dict[int, str | None] = {}
    try:
        for op, arg, _ in pickletools.genops(data):
            name = op.name
            if name in _STRING_OPS:
                recent.append(str(arg))
            elif name == "MEMOIZE":
                memo[len(memo)] = recent[-1] if recent else None
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = recent[-1] if recent else None
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                recent.append(memo.get(int(arg)))
            elif name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                found.add((module, attr))
                recent.append(None)
            elif name == "STACK_GLOBAL":
                if len(recent) < 2 or recent[-2] is None or recent[-1] is None:
                    raise UnsafeWeights("its pickle builds an import name Kestrel cannot read")
                found.add((recent[-2], recent[-1]))
                recent.append(None)
            elif name not in ("PROTO", "FRAME"):
                recent.append(None)
            if len(recent) > 64:
                del recent[:-8]
    except UnsafeWeights:
        raise
    except Exception as e:  # noqa: BLE001 - any malformed stream is refused the same way
        raise UnsafeWeights(f"its pickle is damaged ({type(e).__name__})") from None
    return found


def weights_check(path: Path) -> None:
    """Raise UnsafeWeights unless `path` is a zip checkpoint that names only allowed things."""
    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise UnsafeWeights(
            f"{path.name} is not a PyTorch checkpoint (a .pt saved by torch.save is a zip file)"
        )
    with zipfile.ZipFile(path) as zf:
        pickles = [i for i in zf.infolist() if i.filename.endswith(".pkl")]
        if not pickles:
            raise UnsafeWeights(f"{path.name} holds no pickled model")
        for info in pickles:
            if info.file_size > MAX_PICKLE_BYTES:
                raise UnsafeWeights(f"{path.name}: its pickle is too large")
            for module, name in sorted(pickle_globals(zf.read(info))):
                if not _allowed(module, name):
                    raise UnsafeWeights(
                        f"{path.name} would call {module}.{name} when loaded, which a YOLO "
                        "model never does; it was not loaded"
                    )
