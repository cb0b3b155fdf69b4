"""Archives and files the ingest tests build on the fly."""

import io
import struct
import tarfile
import zipfile
from pathlib import Path

from PIL import Image as PILImage

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"


def jpeg_bytes(width=64, height=48, color=(10, 120, 200), exif_orientation=None) -> bytes:
    out = io.BytesIO()
    img = PILImage.new("RGB", (width, height), color)
    # a corner mark, so rotations are visible
    img.paste((255, 255, 0), (0, 0, width // 4, height // 4))
    kwargs = {}
    if exif_orientation:
        exif = PILImage.Exif()
        exif[0x0112] = exif_orientation
        kwargs["exif"] = exif
    img.save(out, format="JPEG", quality=90, **kwargs)
    return out.getvalue()


def zip_of(files: dict[str, bytes], path: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def zip_folder(folder: Path, path: Path, prefix: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                zf.write(file, prefix + file.relative_to(folder).as_posix())
    return path


def tar_of(files: dict[str, bytes], path: Path, mode="w:gz", links: dict[str, str] | None = None):
    with tarfile.open(path, mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)
    return path


def zip_with_symlink(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("ok.jpg", jpeg_bytes())
        info = zipfile.ZipInfo("evil.jpg")
        info.external_attr = 0o120777 << 16  # a symlink
        zf.writestr(info, "/etc/passwd")
    return path


def zip_with_raw_name(path: Path, raw_name: str) -> Path:
    """A zip whose entry name is written as given (zipfile would not let us write '../x')."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("placeholder.jpg", jpeg_bytes())
    data = path.read_bytes()
    old = b"placeholder.jpg"
    new = raw_name.encode()
    assert len(new) == len(old), "same length keeps the offsets valid"
    path.write_bytes(data.replace(old, new))
    return path


def zip_overlapping(path: Path) -> Path:
    """Two central-directory entries that share one local file (an overlapping-entry bomb)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.jpg", jpeg_bytes())
    data = bytearray(path.read_bytes())
    eocd = data.rfind(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack("<II", data[eocd + 12 : eocd + 20])
    central = bytes(data[cd_offset : cd_offset + cd_size])
    twin = central.replace(b"a.jpg", b"b.jpg")
    new_cd = central + twin
    tail = bytearray(data[eocd:])
    struct.pack_into("<HH", tail, 8, 2, 2)
    struct.pack_into("<II", tail, 12, len(new_cd), cd_offset)
    path.write_bytes(bytes(data[:cd_offset]) + new_cd + bytes(tail))
    return path
