"""What a protobuf field or message looks like on the wire, for comparing two contracts.

Message and enum names are not on the wire and are left out; field numbers, types,
repeatedness, presence, oneof grouping and enum values are what a peer depends on.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

SCALAR_TYPES: dict[int, str] = {
    FieldDescriptor.TYPE_DOUBLE: "double",
    FieldDescriptor.TYPE_FLOAT: "float",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_UINT64: "uint64",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_FIXED64: "fixed64",
    FieldDescriptor.TYPE_FIXED32: "fixed32",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_UINT32: "uint32",
    FieldDescriptor.TYPE_SFIXED32: "sfixed32",
    FieldDescriptor.TYPE_SFIXED64: "sfixed64",
    FieldDescriptor.TYPE_SINT32: "sint32",
    FieldDescriptor.TYPE_SINT64: "sint64",
}


def message_type(field: FieldDescriptor) -> Descriptor:
    assert field.message_type is not None, f"{field.full_name} is not a message field"
    return field.message_type


def enum_type(field: FieldDescriptor) -> EnumDescriptor:
    assert field.enum_type is not None, f"{field.full_name} is not an enum field"
    return field.enum_type


def is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and bool(field.message_type.GetOptions().map_entry)


def is_proto3_optional(field: FieldDescriptor) -> bool:
    """`optional` in proto3: explicit presence through a one-field oneof named `_<name>`."""
    oneof = field.containing_oneof
    return bool(field.has_presence) and oneof is not None and oneof.name == f"_{field.name}"


def type_name(field: FieldDescriptor) -> str:
    """The type as the .proto spells it: a scalar, a message or enum name, or map<K,V>."""
    if is_map(field):
        entry = message_type(field).fields_by_name
        return f"map<{type_name(entry['key'])},{type_name(entry['value'])}>"
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return str(message_type(field).name)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return str(enum_type(field).name)
    return SCALAR_TYPES[field.type]


def label(field: FieldDescriptor) -> str:
    """ "map", "rep", "opt" (proto3 optional), "oneof:<name>", or "" for a plain field."""
    if is_map(field):
        return "map"
    if field.is_repeated:
        return "rep"
    if is_proto3_optional(field):
        return "opt"
    if field.containing_oneof is not None:
        return f"oneof:{field.containing_oneof.name}"
    return ""


def field_shape(field: FieldDescriptor) -> dict[str, object]:
    """The field's wire-relevant facts, its nested message or enum aside."""
    shape: dict[str, object] = {
        "name": field.name,
        "label": label(field),
        "repeated": bool(field.is_repeated),
        "packed": bool(field.is_packed),
        "presence": bool(field.has_presence),
        "oneof": field.containing_oneof.name if field.containing_oneof else None,
    }
    # A message or enum field's own type is compared structurally, not by name.
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        shape["type"] = "map" if is_map(field) else "message"
    elif field.type == FieldDescriptor.TYPE_ENUM:
        shape["type"] = "enum"
    else:
        shape["type"] = SCALAR_TYPES[field.type]
    return shape


def _reserved(message: Descriptor) -> tuple[list[tuple[int, int]], list[str]]:
    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    ranges = sorted((r.start, r.end) for r in proto.reserved_range)
    return ranges, sorted(proto.reserved_name)


def enum_differences(ours: EnumDescriptor, theirs: EnumDescriptor, path: str) -> list[str]:
    our_values = {v.number: v.name for v in ours.values}
    their_values = {v.number: v.name for v in theirs.values}
    if our_values == their_values:
        return []
    return [f"{path}: enum values {our_values} != upstream's {their_values}"]


def message_differences(
    ours: Descriptor,
    theirs: Descriptor,
    path: str,
    seen: set[tuple[str, str]] | None = None,
) -> list[str]:
    """Every wire-relevant difference between two message types, recursively; each entry
    names the field's path from the top message and its number."""
    seen = set() if seen is None else seen
    key = (ours.full_name, theirs.full_name)
    if key in seen:
        return []
    seen.add(key)

    found: list[str] = []
    our_fields, their_fields = ours.fields_by_number, theirs.fields_by_number
    for number in sorted(set(their_fields) - set(our_fields)):
        found.append(f"{path}: field {number} ({their_fields[number].name}) missing from ours")
    for number in sorted(set(our_fields) - set(their_fields)):
        found.append(f"{path}: field {number} ({our_fields[number].name}) not upstream's")

    for number in sorted(set(our_fields) & set(their_fields)):
        our_field, their_field = our_fields[number], their_fields[number]
        where = f"{path}.{their_field.name} (field {number})"
        our_shape, their_shape = field_shape(our_field), field_shape(their_field)
        for fact, value in their_shape.items():
            if our_shape[fact] != value:
                found.append(f"{where}: {fact} is {our_shape[fact]!r}, upstream's {value!r}")
        if our_field.type != their_field.type:
            continue
        if our_field.type == FieldDescriptor.TYPE_MESSAGE:
            found += message_differences(
                message_type(our_field), message_type(their_field), where, seen
            )
        elif our_field.type == FieldDescriptor.TYPE_ENUM:
            found += enum_differences(enum_type(our_field), enum_type(their_field), where)

    our_oneofs = {o.name: sorted(f.number for f in o.fields) for o in ours.oneofs}
    their_oneofs = {o.name: sorted(f.number for f in o.fields) for o in theirs.oneofs}
    if our_oneofs != their_oneofs:
        found.append(f"{path}: oneofs {our_oneofs} != upstream's {their_oneofs}")
    if _reserved(ours) != _reserved(theirs):
        found.append(f"{path}: reserved {_reserved(ours)} != upstream's {_reserved(theirs)}")
    return found
