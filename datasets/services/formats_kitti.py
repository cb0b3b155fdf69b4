"""KITTI object labels and Open Images CSV."""


def claim_kitti(names, read) -> list[str]:
    return []


def parse_kitti(images, files, read, *, task, classes, names):
    raise NotImplementedError


def claim_openimages(names, read) -> list[str]:
    return []


def parse_openimages(images, files, read, *, task, classes, names):
    raise NotImplementedError
