"""``nvidia-smi -q -x``: the XML log of every DTD version (v11/v12/v13, the old 418 layout), read with defusedxml,
and pasted or cut-off pieces of it salvaged tag by tag."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any
from xml.parsers import expat

from defusedxml.ElementTree import fromstring as defused_fromstring

from nvdeploy.parsers.nvidia_smi.fields import _RETIRED_PENDING, _TREE_FIELDS, _assemble, _int, _start, version_of
from nvdeploy.parsers.nvidia_smi.model import SmiFacts, _Tree
from nvdeploy.parsers.text import prepare as _prepare

# ------------------------------------------------------------------------------------------------------ XML

_DOCTYPE_RE = re.compile(r"<!DOCTYPE[^\[>]*(?:\[.*?\])?\s*>", re.DOTALL | re.IGNORECASE)
_TOP_TAGS = ("driver_version", "cuda_version", "attached_gpus", "kmd_version", "cuda_umd_version")


_ENTITY_DECL_RE = re.compile(r"<!ENTITY", re.IGNORECASE)


def _fromstring(text: str) -> ET.Element:
    """The C parser when the document declares no entity (nvidia-smi's own output: a DOCTYPE naming its external
    DTD, which ElementTree never fetches, and no internal subset), so there is nothing to expand; defusedxml's
    pure-Python parser for anything else. The C parser is ~3x faster, and at fleet scale this parse is most of the
    controller's CPU."""
    if _ENTITY_DECL_RE.search(text) is None:
        return ET.fromstring(text)  # noqa: S314 - no entity declaration (checked above)
    return defused_fromstring(text)


def _flatten_xml(element: ET.Element) -> _Tree:
    # Pre-order over the leaves, first value of a path kept; iterative (a hostile document can nest deeply) with
    # one iterator per open element instead of a list per node: this runs for every GPU of every node.
    tree: _Tree = {}
    keep = tree.setdefault
    stack: list[tuple[Iterator[ET.Element], tuple[str, ...]]] = [(iter(element), ())]
    while stack:
        kids, path = stack[-1]
        for kid in kids:
            kid_path = (*path, str(kid.tag).lower())
            if len(kid):
                stack.append((iter(kid), kid_path))
                break
            keep(kid_path, (kid.text or "").strip())
        else:
            stack.pop()
    return tree


def _salvage_xml_header(body: str) -> dict[str, str]:
    """Top-level scalars that were complete before a parse error (truncated output)."""
    found: dict[str, str] = {}
    parser = ET.XMLPullParser(events=("end",))
    try:
        parser.feed(body)  # feed() keeps a syntax error and raises it from read_events() once it is reached
    except ValueError:  # a lone surrogate (text pasted, not decoded from a node's bytes) cannot reach expat
        return found
    events = parser.read_events()
    while True:
        try:
            _event, el = next(events)
        except Exception:  # noqa: BLE001 - StopIteration or the parse error: either way, done
            return found
        if el.tag in _TOP_TAGS and el.tag not in found:
            found[el.tag] = el.text or ""


def parse_xml(text: str) -> SmiFacts:
    """Parse ``nvidia-smi -q -x``. Entities are never resolved: a DOCTYPE with declarations is removed first."""
    return _parse_xml(text, details=True)


def parse_xml_pasted(text: str) -> SmiFacts:
    """:func:`parse_xml` for a pasted capture (``nvdeploy parse``): a document cut off before its end, which
    parse_xml refuses (a node's truncated output is ERROR), is read up to the cut as a fragment."""
    facts = parse_xml(text)
    if facts.gpus or not any(w.startswith("unparseable or truncated XML") for w in facts.warnings):
        return facts
    body, warnings = _prepare(text)
    body = body.strip().lstrip("\ufeff")
    if _XML_ROOT_RE.search(body) is None or "</nvidia_smi_log>" in body:
        return facts  # malformed, not cut short: nothing is guessed
    return _parse_xml_fragment(body, warnings, True, cut=True) or facts


def xml_understood(text: str) -> bool:
    """Whether :func:`parse_xml` would read this document (GPUs, or no warning), without reading each GPU's
    fields: what a node whose GPU facts come from the NVML probe needs of its XML (a third of a simulated
    1,000-node run's controller CPU went to per-GPU fields that were then thrown away)."""
    if _reads_with_gpus(text):
        return True
    facts = _parse_xml(text, details=False)
    return bool(facts.gpus) or not facts.warnings


_GPU_OPEN_RE = re.compile(r"<gpu[\s>/]")
# An entity reference other than XML's own five or a character reference: ElementTree refuses it (its parser
# reports undefined entities) where bare expat, with the DTD unread, lets it pass.
_OTHER_ENTITY_RE = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);)")


def _reads_with_gpus(text: str) -> bool:
    """True when the document is one :func:`_parse_xml` reads and its root's first child section is a ``<gpu>``,
    found with expat and no per-element callback past that section's start tag (~3x cheaper than the tree build);
    False means only "not shown here", and the caller parses as usual.

    The same acceptance as ElementTree's: its C parser is this expat, and the cases where the two differ (an
    entity declaration, an undefined entity, a parse the DOCTYPE-less retry rescues) are left to the full parse.
    """
    text, _warnings, early = _start(text, "xml")
    if early is not None:
        return False
    body = text.strip().lstrip("\ufeff")
    if _ENTITY_DECL_RE.search(body) is not None or _OTHER_ENTITY_RE.search(body) is not None:
        return False
    first = _GPU_OPEN_RE.search(body)
    if first is None:
        return False
    tag_end = body.find(">", first.start())
    if tag_end < 0:
        return False
    depth = 0
    top_gpu = False

    def start(name: str, _attrs: Any) -> None:
        nonlocal depth, top_gpu
        depth += 1
        if depth == 2 and name == "gpu":
            top_gpu = True

    def end(_name: str) -> None:
        nonlocal depth
        depth -= 1

    parser = expat.ParserCreate()
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        # Only the elements before the first <gpu ...> tag get callbacks (a handful): it must open at depth 2,
        # not inside a comment, a CDATA section or a deeper element. The rest is checked for well-formedness only.
        parser.Parse(body[: tag_end + 1], False)
        parser.StartElementHandler = None
        parser.EndElementHandler = None
        if not top_gpu:
            return False
        parser.Parse(body[tag_end + 1:], True)
    except (expat.ExpatError, ValueError, RecursionError):
        return False
    return True


# ------------------------------------------------------------------------------------------- XML fragments

_XML_ROOT_RE = re.compile(r"<nvidia_smi_log\b")
_XML_ANY_TAG_RE = re.compile(r"<[^<>]*>")
_XML_TAG_RE = re.compile(r"<(/?)([A-Za-z_][\w.\-]*)((?:\s+[\w.\-:]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*(/?)>")
_XML_ATTR_RE = re.compile(r"([\w.\-:]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_XML_PIECE_DEPTH = 32
_XML_ENTITIES = {"&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'", "&amp;": "&"}
# Where the GPU-level elements sit, to place a fragment that starts below <gpu> (e.g. at <volatile>).
_GPU_PATHS: tuple[tuple[str, ...], ...] = (
    *(tuple(c.split("/")) for _n, _c, cands in _TREE_FIELDS for c in cands),
    *(("ecc_errors", kind, leaf) for kind in ("volatile", "aggregate")
       for leaf in ("sram_uncorrectable", "dram_uncorrectable", "double_bit")),
    *_RETIRED_PENDING, ("clocks_event_reasons",), ("clocks_throttle_reasons",),
)


def _xml_anchor(tag: str) -> tuple[str, ...] | None:
    """The path above a GPU-level element ``tag``: () for a child of <gpu>, None when unknown or ambiguous
    (``dram_uncorrectable`` alone could be volatile or aggregate: it is not guessed)."""
    if any(path[0] == tag for path in _GPU_PATHS):
        return ()
    above = {path[:path.index(tag)] for path in _GPU_PATHS if tag in path[1:]}
    return above.pop() if len(above) == 1 else None


def _xml_pieces(body: str) -> ET.Element:
    """Elements of a piece of XML, under a synthetic root, built tag by tag (no entity is ever expanded): a
    closing tag whose opener lies before the piece wraps what came before it; elements still open at the end are
    closed; a tag cut at either end is dropped."""
    root = ET.Element("fragment")
    stack = [root]
    pos = 0
    for match in _XML_ANY_TAG_RE.finditer(body):
        text = body[pos:match.start()]
        pos = match.end()
        if len(stack) > 1 and text.strip():
            for entity, char in _XML_ENTITIES.items():
                text = text.replace(entity, char)
            stack[-1].text = (stack[-1].text or "") + text
        tag = _XML_TAG_RE.fullmatch(match.group(0))
        if tag is None:  # a comment, a declaration, a cut tag
            continue
        closing, name, attrs, empty = tag.groups()
        if not closing and len(stack) > _XML_PIECE_DEPTH:
            continue  # nvidia-smi nests a few levels; a path this deep costs its length for every leaf below it
        if not closing:
            attrib = {m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
                      for m in _XML_ATTR_RE.finditer(attrs)}
            element = ET.SubElement(stack[-1], name, attrib)
            if not empty:
                stack.append(element)
        elif any(e.tag == name for e in stack[1:]):
            while stack.pop().tag != name:
                pass
        elif len(stack) == 1 and len(root):
            wrapper = ET.Element(name)
            for kid in list(root):
                root.remove(kid)
                wrapper.append(kid)
            root.append(wrapper)
    return root


def _parse_xml_fragment(body: str, warnings: list[str], details: bool, cut: bool = False) -> SmiFacts | None:
    """A piece of ``nvidia-smi -q -x`` without its <nvidia_smi_log> root: its <gpu> elements, and GPU-level
    elements before them (the piece began inside a <gpu>) as one GPU without index or bus id. ``cut``: a document
    that starts with its root and ends early, read up to the cut. None when it holds no GPU data."""
    root = _xml_pieces(body)
    if cut:
        root = next((e for e in root if e.tag == "nvidia_smi_log"), root)
    loose = ET.Element("gpu")
    sections: list[tuple[_Tree, str | None]] = []
    unplaced: list[str] = []
    for element in root:
        if element.tag == "gpu":
            sections.append((_flatten_xml(element) if details else {}, element.get("id")))
            continue
        if element.tag in _TOP_TAGS or element.tag == "timestamp":
            continue
        anchor = _xml_anchor(str(element.tag).lower())
        if anchor is None:
            unplaced.append(str(element.tag))
            continue
        parent = loose
        for name in anchor:
            found = parent.find(name)
            parent = found if found is not None else ET.SubElement(parent, name)
        parent.append(element)
    if len(loose):
        sections.insert(0, (_flatten_xml(loose) if details else {}, None))
    if not sections:
        return None
    warnings.append("input is a fragment of nvidia-smi -q -x output (cut off before its end): only the GPUs and "
                    "fields before the cut are read" if cut else "input is a fragment of nvidia-smi -q -x output (no "
                    "<nvidia_smi_log> root): only the GPUs and fields it shows are read")
    if unplaced:
        warnings.append(f"elements not placed in a GPU (their parent is not in the fragment): "
                        f"{', '.join(sorted(set(unplaced))[:10])}")
    driver = version_of(root.findtext("kmd_version"), root.findtext("driver_version"))
    cuda = version_of(root.findtext("cuda_umd_version"), root.findtext("cuda_version"))
    return _assemble("xml", driver, cuda, _int(root.findtext("attached_gpus")), sections, warnings, details,
                     fragment=True)


def _parse_xml(text: str, details: bool) -> SmiFacts:
    text, warnings, early = _start(text, "xml")
    if early is not None:
        return early
    body = text.strip().lstrip("\ufeff")
    if _XML_ROOT_RE.search(body) is None:
        piece = _parse_xml_fragment(body, list(warnings), details)
        if piece is not None:
            return piece
    if "<!ENTITY" in body.upper():
        body = _DOCTYPE_RE.sub("", body, count=1)
        warnings.append("DOCTYPE with entity declarations removed before parsing")
    root: ET.Element | None = None
    error = ""
    for candidate in (body, _DOCTYPE_RE.sub("", body, count=1)):
        try:
            root = _fromstring(candidate)
            break
        except Exception as exc:  # noqa: BLE001 - ParseError, ValueError, RecursionError: all mean unreadable
            error = f"{type(exc).__name__}: {exc}"
    if root is None:
        head = _salvage_xml_header(body)
        warnings.append(f"unparseable or truncated XML ({error}); no GPU data read")
        return SmiFacts(version_of(head.get("kmd_version"), head.get("driver_version")),
                        version_of(head.get("cuda_umd_version"), head.get("cuda_version")),
                        _int(head.get("attached_gpus")), (), tuple(warnings), "xml")
    if root.tag != "nvidia_smi_log":
        warnings.append(f"unexpected XML root element <{root.tag}> (expected <nvidia_smi_log>)")
    gpus = root.findall("gpu")
    sections = [(_flatten_xml(g) if details else {}, g.get("id")) for g in gpus]
    driver = version_of(root.findtext("kmd_version"), root.findtext("driver_version"))
    cuda = version_of(root.findtext("cuda_umd_version"), root.findtext("cuda_version"))
    return _assemble("xml", driver, cuda, _int(root.findtext("attached_gpus")), sections, warnings, details)


