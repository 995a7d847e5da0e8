"""Parse nvidia-smi output: ``-q -x`` (XML), ``-q`` (text), the default table, and ``--query-gpu`` CSV.

All parsers are pure and never raise: odd input gives whatever could be read plus ``warnings``. Every per-GPU
field is ``None`` when the input does not say (an excerpt, ``N/A``, ``[Not Supported]``, a field the schema
version lacks). A value the tool could not read (``Unknown Error``, ``GPU is lost``, ``GPU requires reset``,
``Insufficient Permissions``) is ``None`` too, never zero, and is named in :attr:`GpuFacts.errors` with NVML's
error name; ``GPU is lost`` also sets :attr:`GpuFacts.lost`. XML and text are first flattened into
``{path: value}`` with snake_case path parts, so that one extraction table serves every schema version (DTD
v11/v12/v13, the old 418 layout, ``-q`` text).
"""

from nvdeploy.parsers.nvidia_smi.fields import version_of
from nvdeploy.parsers.nvidia_smi.model import GpuFacts, SmiFacts
from nvdeploy.parsers.nvidia_smi.query_csv import parse_csv, parse_version
from nvdeploy.parsers.nvidia_smi.query_text import TABLE_ROW_RE, parse_text
from nvdeploy.parsers.nvidia_smi.xml_log import parse_xml, parse_xml_pasted, xml_understood

__all__ = ["TABLE_ROW_RE", "GpuFacts", "SmiFacts", "parse_csv", "parse_text", "parse_version", "parse_xml",
           "parse_xml_pasted", "version_of", "xml_understood"]
