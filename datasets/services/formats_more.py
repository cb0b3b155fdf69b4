"""Datumaro, Supervisely, VGG Image Annotator (VIA) and CreateML exports."""


def claim_datumaro(names, read) -> list[str]:
    return []


def parse_datumaro(images, files, read, *, task, classes, names):
    raise NotImplementedError


def claim_supervisely(names, read) -> list[str]:
    return []


def parse_supervisely(images, files, read, *, task, classes, names):
    raise NotImplementedError


def claim_via(names, read) -> list[str]:
    return []


def parse_via(images, files, read, *, task, classes, names):
    raise NotImplementedError


def claim_createml(names, read) -> list[str]:
    return []


def parse_createml(images, files, read, *, task, classes, names):
    raise NotImplementedError
