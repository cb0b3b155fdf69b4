"""Opening a .pt: only through torch's restricted unpickler, given an explicit list of classes.

A checkpoint's pickle names what unpickling will call. The full unpickler (what Ultralytics'
loader asks for, `weights_only=False`) calls anything a file names, so a weights upload is code.
torch's restricted unpickler (`weights_only=True`) calls only its own tensor rebuilders and the
globals a process adds with `torch.serialization.add_safe_globals`. Kestrel adds exactly the
classes that real checkpoints hold (CHECKPOINT_CLASSES) and forces that unpickler for every
torch.load in the process with TORCH_FORCE_WEIGHTS_ONLY_LOAD, which torch honours even where a
caller passes weights_only=False: Ultralytics' loaders, its trainer's resume, `strip_optimizer`,
final evaluation, exporter and SAM builder all go through it unchanged.

`checkpoint_loading_restrict()` sets that up; every process that opens a .pt calls it before
anything else (the trainer, the export and inspection worker, the model server, labelling
assist). `weights_check(path)` is the fast pre-check that names what a refused file needs.
"""

import importlib
import os
import pickletools
import sys
import zipfile
from pathlib import Path

MAX_PICKLE_BYTES = 256 * 1024 * 1024

# The classes real checkpoints hold, read from them with
# torch.serialization.get_unsafe_globals_in_checkpoint: every task (detect, segment, classify,
# pose, obb) of every family Kestrel trains (YOLO26, YOLO11, YOLOv8), and YOLO26's semantic
# and depth models, last.pt with its optimizer and the stripped best.pt
# (tests/training/test_checkpoint_loading.py and test_pixel_tasks.py train them and check
# that each still loads). Classes only, named as a pickle names them
# (`__module__.__qualname__`); never a module, never a function. Not every nn.Module is
# harmless: AutoBackend opens files in its constructor, TorchVision downloads, the text models
# of World/YOLOE download and load TorchScript. A class Ultralytics adds later is refused, with
# its name, until it is added here.
CHECKPOINT_CLASSES: tuple[str, ...] = (
    # torch layers and containers
    "torch.nn.modules.activation.SiLU",
    "torch.nn.modules.activation.Tanh",
    "torch.nn.modules.batchnorm.BatchNorm2d",
    "torch.nn.modules.container.ModuleList",
    "torch.nn.modules.container.Sequential",
    "torch.nn.modules.conv.Conv2d",
    "torch.nn.modules.conv.ConvTranspose2d",
    "torch.nn.modules.dropout.Dropout",
    "torch.nn.modules.linear.Identity",
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.pooling.AdaptiveAvgPool2d",
    "torch.nn.modules.pooling.MaxPool2d",
    "torch.nn.modules.upsampling.Upsample",
    # Ultralytics layers
    "ultralytics.nn.modules.block.Attention",
    "ultralytics.nn.modules.block.Bottleneck",
    "ultralytics.nn.modules.block.C2PSA",
    "ultralytics.nn.modules.block.C2f",
    "ultralytics.nn.modules.block.C3k",
    "ultralytics.nn.modules.block.C3k2",
    "ultralytics.nn.modules.block.DFL",
    "ultralytics.nn.modules.block.PSABlock",
    "ultralytics.nn.modules.block.Proto",
    "ultralytics.nn.modules.block.Proto26",
    "ultralytics.nn.modules.block.RealNVP",
    "ultralytics.nn.modules.block.SPPF",
    "ultralytics.nn.modules.conv.Concat",
    "ultralytics.nn.modules.conv.Conv",
    "ultralytics.nn.modules.conv.DWConv",
    "ultralytics.nn.modules.head.Classify",
    "ultralytics.nn.modules.head.Depth",
    "ultralytics.nn.modules.head.Detect",
    "ultralytics.nn.modules.head.OBB",
    "ultralytics.nn.modules.head.OBB26",
    "ultralytics.nn.modules.head.Pose",
    "ultralytics.nn.modules.head.Pose26",
    "ultralytics.nn.modules.head.Segment",
    "ultralytics.nn.modules.head.Segment26",
    "ultralytics.nn.modules.head.SemanticSegment",
    # Ultralytics models, one per task
    "ultralytics.nn.tasks.ClassificationModel",
    "ultralytics.nn.tasks.DepthModel",
    "ultralytics.nn.tasks.DetectionModel",
    "ultralytics.nn.tasks.OBBModel",
    "ultralytics.nn.tasks.PoseModel",
    "ultralytics.nn.tasks.SegmentationModel",
    "ultralytics.nn.tasks.SemanticSegmentationModel",
    # Data: the training arguments of last.pt, and a classifier's preprocessing
    "ultralytics.utils.IterableSimpleNamespace",
    "torchvision.transforms.functional.InterpolationMode",
    "torchvision.transforms.transforms.CenterCrop",
    "torchvision.transforms.transforms.Compose",
    "torchvision.transforms.transforms.Normalize",
    "torchvision.transforms.transforms.Resize",
    "torchvision.transforms.transforms.ToTensor",
)
# Checkpoints saved by older Ultralytics releases (published weights among them), not by
# Kestrel's, keep figures such as best_fitness as numpy scalars: numpy.dtype(...) called, then
# numpy's scalar builder with that dtype and the number's bytes. Both build the number and do
# nothing else.
NUMPY_DTYPE = "numpy.dtype"
NUMPY_SCALAR = ("numpy._core.multiarray.scalar", "numpy.core.multiarray.scalar")
NUMPY_DTYPE_KINDS = ("f8", "f4", "f2", "i8", "i4", "u1", "?")  # the numbers a figure may be

# One name that is not a class. Published weights of older Ultralytics releases (YOLOv8 and
# YOLO11 segment, pose, obb and classify) hold a head's method as an attribute, which a pickle
# writes as `builtins.getattr(Detect, "forward")`. In a checkpoint it stands for
# _checkpoint_getattr: a listed layer class's forward, or a member of a listed enum, and
# nothing else (no other name, no module, nothing that loads, imports, opens or evaluates).
CHECKPOINT_GETATTR = "builtins.getattr"
_HELD_METHODS = frozenset({"forward", "forward_fuse"})

# How these two pickle themselves: by calling the class (an enum by value, a namespace with no
# arguments). Every other class above is only ever restored from saved state (NEWOBJ, then
# BUILD: __new__ and a __dict__ update, no constructor); calling one runs its constructor on
# arguments the file chooses (a model class evaluates the recipe it is given).
_CALLED_WHEN_UNPICKLED = frozenset(
    {
        "ultralytics.utils.IterableSimpleNamespace",
        "torchvision.transforms.functional.InterpolationMode",
    }
)

# Set before Ultralytics is imported (it reads ULTRALYTICS_SAFE_LOAD once): Ultralytics then
# rebuilds a model from its recipe (model.yaml, which a checkpoint carries and the trainer
# rebuilds from) without eval(), taking only layer classes and literal arguments.
RESTRICTED_LOADING_ENV = {"TORCH_FORCE_WEIGHTS_ONLY_LOAD": "1", "ULTRALYTICS_SAFE_LOAD": "1"}


# How every answer about a refused file begins (training.weights_worker writes it).
REFUSED_PREFIX = "The weights file was refused: "


class UnsafeWeights(Exception):
    """The file is not a checkpoint Kestrel will load; the message says why."""


def _checkpoint_getattr(obj, name: str):
    """`builtins.getattr` as a checkpoint may use it (see CHECKPOINT_GETATTR)."""
    import enum
    import inspect
    import pickle
    import types

    if isinstance(obj, type) and obj in checkpoint_classes():
        if issubclass(obj, enum.Enum) and name in obj.__members__:
            return obj.__members__[name]
        # Only the methods those heads hold: a layer's forward is what it computes anyway.
        value = inspect.getattr_static(obj, name, None) if name in _HELD_METHODS else None
        if isinstance(value, types.FunctionType):  # defined in Python, runs no descriptor
            return value
    raise pickle.UnpicklingError(
        f"getattr({getattr(obj, '__qualname__', type(obj).__name__)}, {name!r}) is not something "
        "a YOLO checkpoint holds"
    )


_classes: list[type] = []


def checkpoint_classes() -> list[type]:
    """CHECKPOINT_CLASSES, imported; each must be a class that pickles under its listed name."""
    if _classes:
        return _classes
    classes = []
    for dotted in CHECKPOINT_CLASSES:
        module, _, name = dotted.rpartition(".")
        found = getattr(importlib.import_module(module), name)
        if not isinstance(found, type) or f"{found.__module__}.{found.__qualname__}" != dotted:
            raise RuntimeError(f"{dotted} is not a class of that name in this Ultralytics")
        classes.append(found)
    _classes[:] = classes
    return _classes


_restricted = False


def checkpoint_loading_restrict() -> None:
    """From now on, every torch.load of this process uses the restricted unpickler with
    CHECKPOINT_CLASSES, and Ultralytics builds models from recipes without eval()."""
    global _restricted
    os.environ.update(RESTRICTED_LOADING_ENV)
    # Both set makes torch refuse every load; the opposite switch is never Kestrel's wish.
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    # Ultralytics reads its switch at import: a process that imported it before this call
    # (a test session, a shell) gets the same switch set where Ultralytics reads it.
    for module in ("ultralytics.utils", "ultralytics.nn.tasks"):
        if module in sys.modules:
            sys.modules[module].SAFE_LOAD = True
    if _restricted:
        return
    import numpy
    import torch

    scalar = numpy.float64(0).__reduce__()[0]  # numpy's own name for it moved in numpy 2
    torch.serialization.add_safe_globals(
        [
            *checkpoint_classes(),
            (_checkpoint_getattr, CHECKPOINT_GETATTR),
            numpy.dtype,
            *((scalar, name) for name in NUMPY_SCALAR),
            # What numpy.dtype(...) builds: torch restores its state only for allowed types.
            *(type(numpy.dtype(kind)) for kind in NUMPY_DTYPE_KINDS),
        ]
    )
    _restricted = True


def pickle_globals(data: bytes) -> set[tuple[str, str]]:
    """Every (module, name) a pickle of any protocol would import, read from its opcodes,
    never executed; only to say what a pickle torch's loader cannot read would have called.

    STACK_GLOBAL takes its two names from the stack; they must come straight from the two ops
    before it (string literals or memo reads of strings). Names built any other way cannot be
    read, and the file is refused.
    """
    found: set[tuple[str, str]] = set()
    recent: list[str | None] = []  # what the last ops pushed: a string, or None for anything else
    memo: dict[int, str | None] = {}
    try:
        for op, arg, _ in pickletools.genops(data):
            name = op.name
            if name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                recent.append(str(arg))
            elif name in ("SHORT_BINSTRING", "BINSTRING", "STRING"):
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


def _torch_name(module: str, name: str) -> str:
    """A GLOBAL's name as torch's unpickler resolves it (Python 2 names mapped, with torch's
    own tables)."""
    from torch._utils import IMPORT_MAPPING, NAME_MAPPING

    if (module, name) in NAME_MAPPING:
        module, name = NAME_MAPPING[(module, name)]
    elif module in IMPORT_MAPPING:
        module = IMPORT_MAPPING[module]
    return f"{module}.{name}"


def _pickle_walk(data: bytes, filename: str) -> tuple[set[str], str]:
    """Every global a pickle names, and why it misuses one of Kestrel's classes ("" if not):
    calling one (REDUCE) or holding one as a bare value, instead of restoring objects of it
    from saved state (NEWOBJ).

    torch's restricted unpickler would allow both for any class it was given. This follows
    the stack exactly as that unpickler does, over the opcodes it reads (it refuses any
    other): GLOBAL pushes a name, everything else a value, MARK opens a new stack.
    """
    restored_only = set(CHECKPOINT_CLASSES) - _CALLED_WHEN_UNPICKLED
    names: set[str] = set()
    misuse: list[str] = []
    stack: list = []
    metastack: list[list] = []
    memo: dict[int, object] = {}

    def flag(item) -> None:
        if isinstance(item, str) and item in restored_only:
            misuse.append(
                f"{filename} holds the class {item} itself rather than an object of it, for "
                "something to call later; a checkpoint only restores saved objects"
            )
        elif isinstance(item, _Items):
            for inner in item:
                flag(inner)

    def pop():
        item = stack.pop()
        flag(item)
        return item

    def pop_mark() -> None:
        nonlocal stack
        while stack:
            pop()
        stack = metastack.pop()

    values = {"NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "BINFLOAT"}
    values |= {"LONG1", "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"}
    texts = {"BINUNICODE", "SHORT_BINSTRING"}
    try:
        for op, arg, _ in pickletools.genops(data):
            name = op.name
            if name == "GLOBAL":
                stack.append(_torch_name(*str(arg).split(" ", 1)))
                names.add(stack[-1])
            elif name in values:
                stack.append(None)
            elif name in texts:
                stack.append(_Text(str(arg)))
            elif name == "NEWOBJ":
                pop()  # the arguments
                stack.pop()  # the class: restored from state, its constructor never runs
                stack.append(None)
            elif name == "REDUCE":
                args = stack.pop()
                func = stack.pop()
                # getattr(<a listed class>, "<name>"), see CHECKPOINT_GETATTR: the class is
                # named there, not held
                held_method = (
                    isinstance(args, _Items)
                    and len(args) == 2
                    and args[0] in CHECKPOINT_CLASSES
                    and isinstance(args[1], _Text)
                    and _getattr_allowed(args[0], args[1].value)
                )
                if func == CHECKPOINT_GETATTR and not held_method:
                    misuse.append(
                        f"{filename} would call {CHECKPOINT_GETATTR} on something other than a "
                        "listed layer class and a name, which a YOLO checkpoint never does"
                    )
                if not (func == CHECKPOINT_GETATTR and held_method):
                    flag(args)
                if isinstance(func, str) and func in restored_only:
                    misuse.append(
                        f"{filename} would run the constructor of {func} with arguments of "
                        "its own when loaded; a checkpoint only restores saved layers"
                    )
                if not isinstance(func, str):
                    misuse.append(
                        f"{filename} would call something it built itself when loaded; a "
                        "checkpoint calls only torch's rebuilders"
                    )
                stack.append(None)
            elif name in ("BUILD", "APPEND", "BINPERSID"):
                pop()
                if name == "BINPERSID":
                    stack.append(None)
                elif not stack:
                    raise IndexError(name)
            elif name == "SETITEM":
                pop()
                pop()
                if not stack:
                    raise IndexError(name)
            elif name in ("APPENDS", "SETITEMS"):
                pop_mark()
            elif name == "MARK":
                metastack.append(stack)
                stack = []
            elif name == "TUPLE":
                items = _Items(stack)
                stack = metastack.pop()
                stack.append(items)
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                count = int(name[-1])
                if len(stack) < count:
                    raise IndexError(name)
                items = _Items(stack[-count:])
                del stack[-count:]
                stack.append(items)
            elif name in ("BINGET", "LONG_BINGET"):
                stack.append(memo[int(arg)])
            elif name in ("BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = stack[-1]
            elif name == "STOP":
                pop()
            elif name != "PROTO":
                raise ValueError(name)  # torch's unpickler reads no other opcode
    except Exception as e:  # noqa: BLE001 - torch's unpickler fails on the same streams
        raise UnsafeWeights(f"{filename}: its pickle is damaged ({type(e).__name__})") from None
    return names, misuse[0] if misuse else ""


class _Text:
    """A string value on the walk's stack (a GLOBAL's name is a plain str there)."""

    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value


def _getattr_allowed(dotted: str, name: str) -> bool:
    import pickle

    cls = dict(zip(CHECKPOINT_CLASSES, checkpoint_classes(), strict=True))[dotted]
    try:
        _checkpoint_getattr(cls, name)
    except pickle.UnpicklingError:
        return False
    return True


class _Items(list):
    """A tuple the walk has built: what it holds is judged when it is used (as getattr's
    arguments, a class may be named in it)."""


def _pickle_read(path: Path, name: str) -> bytes:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        pickles = [i for i in zf.infolist() if i.filename.rpartition("/")[2] == "data.pkl"]
        if len(pickles) != 1 or len(set(names)) != len(names):
            raise UnsafeWeights(f"{name} is not laid out as torch.save writes a checkpoint")
        if pickles[0].file_size > MAX_PICKLE_BYTES:
            raise UnsafeWeights(f"{name}: its pickle is too large")
        return zf.read(pickles[0])


def _named(names) -> str:
    names = sorted(names)
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def weights_check(path: Path, *, name: str | None = None) -> None:
    """Raise UnsafeWeights, naming what is forbidden, unless `path` is a torch.save checkpoint
    whose pickle names only torch's own tensor rebuilders and CHECKPOINT_CLASSES, and restores
    objects of those classes without calling them. Sets up restricted loading on the way.
    `name`: what the messages call the file (by default its file name; a stored file's is part
    of its storage key, which a message never shows)."""
    path = Path(path)
    name = name or path.name
    if not zipfile.is_zipfile(path):
        raise UnsafeWeights(
            f"{name} is not a PyTorch checkpoint (a .pt saved by torch.save is a zip file)"
        )
    checkpoint_loading_restrict()
    import pickle

    import torch

    data = _pickle_read(path, name)
    try:
        # torch's own reading of the file: the names its unpickler would refuse.
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except ValueError as e:  # not a torch.save zip, or a TorchScript archive
        raise UnsafeWeights(f"{name}: {e}") from None
    except (pickle.UnpicklingError, EOFError, RuntimeError):
        # Not a pickle torch's unpickler reads (another protocol, or garbage): say what it
        # would have called, if it names anything.
        named = {_torch_name(m, n) for m, n in pickle_globals(data)} - set(CHECKPOINT_CLASSES)
        if named:
            raise UnsafeWeights(
                f"{name} would call {_named(named)} when loaded, which a YOLO checkpoint "
                "never does (nor is its pickle one torch.save writes); it was not loaded"
            ) from None
        raise UnsafeWeights(
            f"{name}: its pickle is damaged or not one torch.save writes; it was not loaded"
        ) from None
    names, misuse = _pickle_walk(data, name)
    # torch adds globals of its own when some of its modules are imported (the exceptions of
    # torch.distributed, DTensor, nested tensors): no YOLO checkpoint holds them, and whether
    # a file passes must not depend on what this process happened to import.
    others = {_dotted(entry) for entry in torch.serialization.get_safe_globals()}
    ours = {*CHECKPOINT_CLASSES, CHECKPOINT_GETATTR, NUMPY_DTYPE, *NUMPY_SCALAR}
    forbidden = set(unsafe) | (names & (others - ours))
    if forbidden:
        raise UnsafeWeights(
            f"{name} would call {_named(forbidden)} when loaded, which a YOLO "
            "checkpoint never does; it was not loaded"
        )
    if misuse:
        raise UnsafeWeights(misuse)


def _dotted(entry) -> str:
    """A safe-globals entry (a class, or a (class, name) pair) by the name a pickle gives it."""
    if isinstance(entry, tuple):
        return entry[1]
    return f"{entry.__module__}.{entry.__qualname__}"
