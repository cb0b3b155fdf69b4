"""The labelling tools' own exports, read into formats.py's neutral `Parsed`.

A module per tool (cvat, labelstudio, datumaro, supervisely, via, createml, kitti, openimages),
each with the `claim_*(names, read)` and `parse_*(images, files, read, *, task, classes, names)`
that format_detect.py's TOOL_FORMATS lists; CVAT's and Label Studio's readers go on in
cvat_shapes and labelstudio_match / _regions / _pose. shapes.py is the collector that Datumaro,
Supervisely, VIA and CreateML read their shapes into; common.py what several modules share.
"""
