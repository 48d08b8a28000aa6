"""Media: the manifest CSV, the synthetic set, and timed decoding / packing of samples.

Importing this package does not import PyAV, NumPy or transformers (they load on first use).
"""

from lmmbench.media.manifest import MEDIA_COLUMNS, REQUIRED_COLUMNS, ManifestRow, load_manifest, write_manifest

__all__ = ["MEDIA_COLUMNS", "REQUIRED_COLUMNS", "ManifestRow", "load_manifest", "write_manifest"]
