"""How the message browser shows record bytes: the view chosen, the cap, and characters
that could hide or reorder text made visible."""

from __future__ import annotations

from web.shown import VALUE_CAP, show, visible


def test_auto_prefers_json_then_text_then_hex() -> None:
    assert show(b'{"a":[1,2]}').text == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert show(b'{"a":[1,2]}').kind == "json"
    assert show(b"42").kind == "text"  # a bare JSON number reads better as text
    assert show(b"{not json").kind == "text"
    assert show("żółw".encode()).text == "żółw"
    assert show(b"\xff\x00").text == "ff 00"
    assert show(b"\xff\x00").kind == "hex"
    assert show(None).kind == "null"


def test_a_forced_view_wins_where_it_can() -> None:
    assert show(b'{"a": 1}', "text").text == '{"a": 1}'
    assert show(b"abc", "hex").text == "61 62 63"
    assert show(b"\xffabc", "text").text == "\ufffdabc"
    assert show(b"plain", "json").kind == "text"  # not JSON: the next view that fits
    assert show(b"\xff", "json").kind == "hex"


def test_values_are_cut_at_the_cap_with_a_note() -> None:
    long_text = show(b"y" * (VALUE_CAP + 10))
    assert long_text.text == "y" * VALUE_CAP
    assert long_text.truncated
    assert long_text.note == f"truncated: first 4 KiB (characters) of {VALUE_CAP + 10} bytes shown"
    long_hex = show(b"\xff" * (VALUE_CAP + 1))
    assert long_hex.text.count("ff") == VALUE_CAP
    assert "(bytes)" in long_hex.note
    assert show(b"short").note == ""


def test_control_and_direction_characters_are_made_visible() -> None:
    assert visible("a\x00b\x1b[0m\tc\nd\x7f") == "a\\x00b\\x1b[0m\tc\nd\\x7f"
    assert visible("x\u202ey\u2028") == "x\\u202ey\\u2028"
    assert show(b'{"k": "\\u202e"}').text == '{\n  "k": "\\u202e"\n}'
