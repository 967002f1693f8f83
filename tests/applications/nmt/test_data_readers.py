"""NMT data readers (`read_tsv`, `read_parallel`, `Pairs`): the layouts they read and the one-line errors a
user's file gets (missing, empty, not the layout, not the encoding, misaligned)."""

import pytest
from attnlayers.applications import nmt


def _message(error):
    text = str(error.value)
    assert "\n" not in text, text  # one line
    return text


def test_read_tsv(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("Guten Morgen.\tGood morning.\n\n  Danke! \tThanks!\r\n", encoding="utf-8")
    pairs = nmt.read_tsv(path)
    assert pairs.source == ["Guten Morgen.", "Danke!"]
    assert pairs.target == ["Good morning.", "Thanks!"]
    assert list(pairs) == [("Guten Morgen.", "Good morning."), ("Danke!", "Thanks!")]
    assert len(pairs) == 2 and pairs[1] == ("Danke!", "Thanks!")


def test_read_tsv_line_endings_and_byte_order_mark(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes("\ufeffeins\tone\r\nzwei\ttwo\rdrei\tthree".encode())  # BOM, CRLF, CR, no final newline
    assert list(nmt.read_tsv(path)) == [("eins", "one"), ("zwei", "two"), ("drei", "three")]
    latin = tmp_path / "latin.tsv"
    latin.write_bytes("Grüße\tgreetings\n".encode("latin-1"))
    assert nmt.read_tsv(latin, encoding="latin-1").source == ["Grüße"]


@pytest.mark.parametrize("bad_line", ["no tab here", "one\ttwo\tthree"])
def test_read_tsv_names_file_and_line(tmp_path, bad_line):
    path = tmp_path / "bad.tsv"
    path.write_text(f"a\tb\n{bad_line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.tsv, line 2: expected 2 tab-separated fields"):
        nmt.read_tsv(path)


def test_read_tsv_counts_malformed_lines(tmp_path):
    path = tmp_path / "bad.tsv"
    lines = ["a\tb", "c d", "e\tf", "", "g h"] + [f"x{i}" for i in range(6)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as error:
        nmt.read_tsv(path)
    text = _message(error)
    assert "bad.tsv, line 2: expected 2 tab-separated fields (source, target), received 1: 'c d'" in text
    assert "(8 of 10 lines malformed: line 2, 5, 6, 7, 8, ...)" in text


def test_read_tsv_missing_empty_and_not_tab_separated(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        nmt.read_tsv(tmp_path / "missing.tsv")
    assert _message(error).endswith("missing.tsv not found: read_tsv expects one `source<TAB>target` pair per line.")
    with pytest.raises(FileNotFoundError, match="is a directory"):
        nmt.read_tsv(tmp_path)

    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError) as error:
        nmt.read_tsv(empty)
    assert _message(error) == f"{empty} is empty: read_tsv expects one `source<TAB>target` pair per line."
    empty.write_text("\n  \n\t\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty\.tsv is empty \(only 3 blank lines\)"):
        nmt.read_tsv(empty)

    spaces = tmp_path / "spaces.txt"
    spaces.write_text("Guten Morgen.    Good morning.\nDanke!    Thanks!\n", encoding="utf-8")
    with pytest.raises(ValueError) as error:
        nmt.read_tsv(spaces)
    assert _message(error) == (
        f"{spaces}: none of its 2 lines is a tab-separated pair (line 1 has 1 field: "
        "'Guten Morgen.    Good morning.'); read_tsv expects one `source<TAB>target` pair per line."
    )


def test_read_tsv_wrong_encoding_names_the_line(tmp_path):
    path = tmp_path / "latin.tsv"
    path.write_bytes("a\tb\nGrüße\tgreetings\n".encode("latin-1"))
    with pytest.raises(ValueError) as error:
        nmt.read_tsv(path)
    assert "latin.tsv, line 2: not utf-8 text" in _message(error)
    assert "encoding=" in str(error.value)


def test_read_parallel(tmp_path):
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_text("Hallo Welt.\n\nTschüss.\n", encoding="utf-8")
    tgt.write_text("Hello world.\n\nBye.", encoding="utf-8")  # no final newline: still 3 lines
    pairs = nmt.read_parallel(src, tgt)
    assert pairs.source == ["Hallo Welt.", "", "Tschüss."]
    assert pairs.target == ["Hello world.", "", "Bye."]


def test_read_parallel_line_count_mismatch(tmp_path):
    src, tgt = tmp_path / "a.de", tmp_path / "b.en"
    src.write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    tgt.write_text("one\ntwo\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"3 lines in .*a\.de and 2 lines in .*b\.en"):
        nmt.read_parallel(src, tgt)
    with pytest.raises(ValueError) as error:
        nmt.read_parallel(src, tgt)
    _message(error)


def test_read_parallel_missing_and_empty_files(tmp_path):
    src, tgt = tmp_path / "a.de", tmp_path / "b.en"
    src.write_text("eins\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError) as error:
        nmt.read_parallel(src, tgt)
    assert _message(error).startswith(f"{tgt} not found: read_parallel expects one sentence per line")
    tgt.write_text("", encoding="utf-8")
    with pytest.raises(ValueError) as error:
        nmt.read_parallel(src, tgt)
    assert _message(error) == (
        f"{tgt} is empty: read_parallel expects one sentence per line, line i translating line i of {src}."
    )


def test_pairs_validates_lengths():
    with pytest.raises(ValueError, match="2 sources and 1 targets"):
        nmt.Pairs(["a", "b"], ["x"])
    with pytest.raises(ValueError, match="1 alignments for 2 pairs"):
        nmt.Pairs(["a", "b"], ["x", "y"], [[0]])


def test_pairs_select_slice_and_swap():
    pairs = nmt.Pairs(["a b", "c d e"], ["x y", "z w v"], [[1, 0], [0, 2, 1]])
    assert pairs[1:] == nmt.Pairs(["c d e"], ["z w v"], [[0, 2, 1]])
    assert pairs.select([1, 0]).source == ["c d e", "a b"]
    back = pairs.swap()
    assert back.source == pairs.target and back.alignments == [[1, 0], [0, 2, 1]]
    with pytest.raises(ValueError, match="one-to-one"):
        nmt.Pairs(["a b"], ["x y"], [[0, 0]]).swap()
