"""rabbitry.pipeline.inputs: path checks, format detection and the parsing of one message."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rabbitry.pipeline.inputs import (
    DEFAULT_MAX_PAYLOAD,
    JSONL,
    MAX_ID,
    PARQUET,
    REJECT_EXCERPT,
    Message,
    PipelineInputError,
    Reject,
    check_message,
    check_paths,
    detect_format,
    parse_line,
    rejects_path,
)

MAX = 64  # a small payload limit for the boundary tests

not_root = pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="root ignores file permissions, so chmod cannot make a path unusable",
)


def parse(raw: str, max_payload: int = MAX, line: int = 7) -> Message | Reject | None:
    return parse_line(line, raw, max_payload)


def rejected(raw: str, max_payload: int = MAX) -> Reject:
    result = parse(raw, max_payload)
    assert isinstance(result, Reject), result
    assert result.line == 7
    return result


# -- good lines ----------------------------------------------------------------------------------


def test_a_good_line() -> None:
    assert parse('{"id": "m-1", "payload": "hello"}') == Message(7, "m-1", "hello")


def test_extra_fields_are_ignored() -> None:
    assert parse('{"id": "a", "payload": "p", "extra": [1]}') == Message(7, "a", "p")


def test_surrounding_whitespace_is_fine() -> None:
    assert parse('  {"id": "a", "payload": "p"}\r') == Message(7, "a", "p")


@pytest.mark.parametrize(("raw_id", "expected"), [(0, "0"), (42, "42"), (-3, "-3")])
def test_integer_ids_are_accepted_as_strings(raw_id: int, expected: str) -> None:
    assert parse(json.dumps({"id": raw_id, "payload": "p"})) == Message(7, expected, "p")


def test_an_integer_id_and_its_string_are_the_same_id() -> None:
    a, b = parse('{"id": 5, "payload": "p"}'), parse('{"id": "5", "payload": "p"}')
    assert isinstance(a, Message) and isinstance(b, Message)
    assert a.id == b.id


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        ({"a": 1, "b": [1, 2]}, '{"a":1,"b":[1,2]}'),
        ([1, "x"], '[1,"x"]'),
        (12, "12"),
        (1.5, "1.5"),
        (True, "true"),
        (None, "null"),
        ("", ""),
    ],
)
def test_non_string_payloads_are_json_encoded(payload: object, text: str) -> None:
    assert parse(json.dumps({"id": "a", "payload": payload})) == Message(7, "a", text)


def test_a_string_payload_is_kept_as_is() -> None:
    assert parse(json.dumps({"id": "a", "payload": '{"not": "decoded"}'})) == Message(
        7, "a", '{"not": "decoded"}'
    )


def test_an_id_of_max_length_is_accepted() -> None:
    result = parse(json.dumps({"id": "x" * MAX_ID, "payload": "p"}))
    assert isinstance(result, Message)
    assert result.id == "x" * MAX_ID


def test_the_default_payload_limit() -> None:
    assert DEFAULT_MAX_PAYLOAD == 256 * 1024
    raw = json.dumps({"id": "a", "payload": "x" * DEFAULT_MAX_PAYLOAD})
    assert isinstance(parse_line(1, raw, DEFAULT_MAX_PAYLOAD), Message)
    raw = json.dumps({"id": "a", "payload": "x" * (DEFAULT_MAX_PAYLOAD + 1)})
    assert isinstance(parse_line(1, raw, DEFAULT_MAX_PAYLOAD), Reject)


# -- blank and bad lines -------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["", " ", "\t", "\n", "  \r\n"])
def test_blank_lines_are_neither_messages_nor_rejects(raw: str) -> None:
    assert parse(raw) is None


@pytest.mark.parametrize("raw", ["{", '{"id": "a", "payload": }', "not json", "{'id': 'a'}", "]"])
def test_malformed_json(raw: str) -> None:
    reject = rejected(raw)
    assert reject.reason.startswith("malformed JSON: ")
    assert reject.text == raw


@pytest.mark.parametrize(
    ("raw", "kind"),
    [("[1, 2]", "list"), ('"a string"', "str"), ("42", "int"), ("null", "NoneType")],
)
def test_json_that_is_not_an_object(raw: str, kind: str) -> None:
    reject = rejected(raw)
    assert reject.reason == f"expected a JSON object, got {kind}"


@pytest.mark.parametrize(
    "raw", ['{"payload": "p"}', '{"id": null, "payload": "p"}', '{"id": "", "payload": "p"}']
)
def test_missing_or_empty_id(raw: str) -> None:
    assert rejected(raw).reason == "missing id"


@pytest.mark.parametrize(
    ("raw_id", "kind"),
    [(True, "bool"), (False, "bool"), (1.0, "float"), (2.5, "float"), ([1], "list"), ({}, "dict")],
)
def test_ids_that_are_not_strings_or_integers(raw_id: object, kind: str) -> None:
    reject = rejected(json.dumps({"id": raw_id, "payload": "p"}))
    assert reject.reason == f"id must be a string or an integer, got {kind}"


def test_an_id_one_longer_than_the_limit() -> None:
    reject = rejected(json.dumps({"id": "x" * (MAX_ID + 1), "payload": "p"}))
    assert reject.reason == f"id longer than {MAX_ID} characters"


def test_an_integer_id_longer_than_the_limit() -> None:
    reject = rejected('{"id": ' + "9" * (MAX_ID + 1) + ', "payload": "p"}')
    assert reject.reason == f"id longer than {MAX_ID} characters"


def test_missing_payload() -> None:
    assert rejected('{"id": "a"}').reason == "missing payload"


# -- payload size: bytes of UTF-8 ----------------------------------------------------------------


def test_a_payload_of_exactly_the_limit_is_accepted() -> None:
    result = parse(json.dumps({"id": "a", "payload": "x" * MAX}))
    assert isinstance(result, Message)
    assert len(result.payload) == MAX


def test_a_payload_one_byte_over_the_limit_is_rejected() -> None:
    reject = rejected(json.dumps({"id": "a", "payload": "x" * (MAX + 1)}))
    assert reject.reason == f"payload of {MAX + 1} bytes exceeds {MAX}"


def test_multi_byte_characters_count_in_bytes() -> None:
    # "é" is 2 bytes in UTF-8 and "€" 3: MAX // 2 of the first fit exactly, one more does not.
    fits = parse(json.dumps({"id": "a", "payload": "é" * (MAX // 2)}))
    assert isinstance(fits, Message)
    assert fits.payload == "é" * (MAX // 2)
    over = rejected(json.dumps({"id": "a", "payload": "é" * (MAX // 2) + "x"}))
    assert over.reason == f"payload of {MAX + 1} bytes exceeds {MAX}"
    # 22 characters, 66 bytes: far under MAX characters, over MAX bytes.
    euros = rejected(json.dumps({"id": "a", "payload": "€" * 22}, ensure_ascii=False))
    assert euros.reason == f"payload of 66 bytes exceeds {MAX}"


def test_a_json_encoded_payload_is_measured_in_its_compact_encoding() -> None:
    # {"k":"<60 x>"} is 8 + 60 = 68 bytes compact, so over MAX; a list of 31 zeros is 63 bytes.
    over = rejected(json.dumps({"id": "a", "payload": {"k": "x" * 60}}))
    assert over.reason == f"payload of 68 bytes exceeds {MAX}"
    fits = parse(json.dumps({"id": "a", "payload": [0] * 31}))
    assert isinstance(fits, Message)
    assert len(fits.payload.encode()) == 63


def test_check_message_on_a_decoded_record() -> None:
    assert check_message(3, {"id": "a", "payload": "p"}, "raw", MAX) == Message(3, "a", "p")
    reject = check_message(4, {"id": "a"}, "the raw row", MAX)
    assert reject == Reject(4, "missing payload", "the raw row")


# -- rejects: line numbers and excerpts ----------------------------------------------------------


def test_a_reject_keeps_its_line_number() -> None:
    reject = parse_line(123456789, "{", MAX)
    assert isinstance(reject, Reject)
    assert reject.line == 123456789


def test_a_short_offending_line_is_kept_whole() -> None:
    raw = "x" * REJECT_EXCERPT
    assert rejected(raw).text == raw


def test_a_long_offending_line_is_truncated() -> None:
    raw = json.dumps({"id": "a", "payload": "y" * 1000})
    reject = rejected(raw, max_payload=10)
    assert reject.text == raw[:REJECT_EXCERPT] + "..."
    assert len(reject.text) == REJECT_EXCERPT + 3


def test_reject_to_json() -> None:
    reject = Reject(9, "missing id", '{"payload": "é"}')
    assert json.loads(reject.to_json()) == {
        "line": 9,
        "reason": "missing id",
        "text": '{"payload": "é"}',
    }


# -- rejects_path --------------------------------------------------------------------------------


def test_rejects_path_is_next_to_the_output(tmp_path: Path) -> None:
    assert rejects_path(tmp_path / "out.parquet") == tmp_path / "out.parquet.rejects.jsonl"
    assert rejects_path(tmp_path / "out") == tmp_path / "out.rejects.jsonl"


# -- detect_format -------------------------------------------------------------------------------


def test_a_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "msgs.parquet"
    path.write_bytes(b"PAR1")
    assert detect_format(path) == PARQUET


def test_a_directory_of_part_files(tmp_path: Path) -> None:
    for name in ("part-00000.snappy.parquet", "part-00001.snappy.parquet", "_SUCCESS", ".crc"):
        (tmp_path / name).write_bytes(b"")
    assert detect_format(tmp_path) == PARQUET


def test_a_directory_of_json_lines(tmp_path: Path) -> None:
    (tmp_path / "part-0.jsonl").write_text("{}\n")
    (tmp_path / "_SUCCESS").write_text("")
    assert detect_format(tmp_path) == JSONL


@pytest.mark.parametrize("name", ["msgs.jsonl", "msgs.json", "msgs", "msgs.txt"])
def test_other_files_are_json_lines(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text('{"id": "a", "payload": "p"}\n')
    assert detect_format(path) == JSONL


# -- check_paths ---------------------------------------------------------------------------------


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "payload": "p"}\n')
    return path


def test_good_paths(tmp_path: Path, source: Path) -> None:
    found = check_paths(str(source), str(tmp_path / "out.parquet"))
    assert found == (source.resolve(), (tmp_path / "out.parquet").resolve(), JSONL)


def test_good_paths_with_a_parquet_input(tmp_path: Path) -> None:
    (tmp_path / "in.parquet").write_bytes(b"PAR1")
    assert check_paths(str(tmp_path / "in.parquet"), str(tmp_path / "out"))[2] == PARQUET


def test_relative_paths_are_resolved(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    found_in, found_out, _ = check_paths("in.jsonl", "out")
    assert found_in == source.resolve()
    assert found_out == (tmp_path / "out").resolve()


def test_a_missing_input(tmp_path: Path) -> None:
    with pytest.raises(PipelineInputError, match="does not exist") as info:
        check_paths(str(tmp_path / "nope.jsonl"), str(tmp_path / "out"))
    assert "nope.jsonl" in str(info.value)


@not_root
def test_an_unreadable_input(tmp_path: Path, source: Path) -> None:
    source.chmod(0o200)
    try:
        with pytest.raises(PipelineInputError, match="not readable"):
            check_paths(str(source), str(tmp_path / "out"))
    finally:
        source.chmod(0o600)


def test_an_empty_input_directory(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    with pytest.raises(PipelineInputError, match="is empty"):
        check_paths(str(tmp_path / "in"), str(tmp_path / "out"))


def test_an_existing_output_without_overwrite(tmp_path: Path, source: Path) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(PipelineInputError, match=r"already exists.*--overwrite"):
        check_paths(str(source), str(tmp_path / "out"))


def test_an_existing_output_with_overwrite(tmp_path: Path, source: Path) -> None:
    (tmp_path / "out").mkdir()
    assert check_paths(str(source), str(tmp_path / "out"), overwrite=True)[1] == (tmp_path / "out")


def test_an_output_directory_that_does_not_exist(tmp_path: Path, source: Path) -> None:
    with pytest.raises(PipelineInputError, match=r"output directory .*missing.* does not exist"):
        check_paths(str(source), str(tmp_path / "missing" / "out"))


@not_root
def test_an_output_directory_that_is_not_writable(tmp_path: Path, source: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        with pytest.raises(PipelineInputError, match="not writable"):
            check_paths(str(source), str(parent / "out"))
    finally:
        parent.chmod(0o700)


def test_output_the_same_as_input(tmp_path: Path, source: Path) -> None:
    with pytest.raises(PipelineInputError, match="same path"):
        check_paths(str(source), str(source), overwrite=True)


def test_output_the_same_as_input_through_another_spelling(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(PipelineInputError, match="same path"):
        check_paths(str(source), "sub/../in.jsonl", overwrite=True)


def test_an_input_inside_the_output_directory_is_refused_with_overwrite(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    inner = tmp_path / "out" / "in.jsonl"
    inner.write_text('{"id": "a", "payload": "p"}\n')
    with pytest.raises(PipelineInputError):
        check_paths(str(inner), str(tmp_path / "out"), overwrite=True)


def test_an_input_that_is_the_outputs_reject_file_is_refused(tmp_path: Path) -> None:
    output = tmp_path / "out"
    rejects = rejects_path(output)
    rejects.write_text('{"id": "a", "payload": "p"}\n')
    with pytest.raises(PipelineInputError):
        check_paths(str(rejects), str(output))


def test_the_input_is_checked_before_the_output(tmp_path: Path) -> None:
    with pytest.raises(PipelineInputError, match="input"):
        check_paths(str(tmp_path / "nope"), str(tmp_path / "missing" / "out"))


def test_pipeline_input_error_is_a_value_error() -> None:
    assert issubclass(PipelineInputError, ValueError)
