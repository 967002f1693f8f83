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


# --------------------------------------------------------------------------------------------------
# Columns: which two fields of a wider file (Tatoeba / Anki: english<TAB>french<TAB>attribution) are the pair.

TATOEBA = "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM)\nHi.\tSalut !\tCC-BY 2.0 (France)\n"


def test_read_tsv_columns_reads_a_three_column_file(tmp_path):
    path = tmp_path / "fra.txt"
    path.write_text(TATOEBA, encoding="utf-8")
    assert list(nmt.read_tsv(path, columns=(0, 1))) == [("Go.", "Va !"), ("Hi.", "Salut !")]
    assert list(nmt.read_tsv(path, columns=(1, 0))) == [("Va !", "Go."), ("Salut !", "Hi.")]
    two = tmp_path / "two.tsv"
    two.write_text("eins\tone\n", encoding="utf-8")
    assert list(nmt.read_tsv(two, columns=(0, 1))) == [("eins", "one")]  # at least 2 fields: 2 is fine


def test_read_tsv_default_stays_strict_and_names_columns(tmp_path):
    path = tmp_path / "fra.txt"
    path.write_text(TATOEBA, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        nmt.read_tsv(path)  # the default: exactly two fields
    text = _message(error)
    assert "none of its 2 lines is a tab-separated pair (line 1 has 3 fields" in text
    assert "pass columns=(0, 1) to take the first two fields" in text
    assert isinstance(error.value, nmt.data.TsvFieldError)
    assert (error.value.line_number, error.value.field_count, error.value.exact) == (1, 3, True)
    mixed = tmp_path / "mixed.tsv"
    mixed.write_text("a\tb\nc\td\te\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2: expected 2 tab-separated fields .* pass columns=\(0, 1\)"):
        nmt.read_tsv(mixed)


def test_read_tsv_columns_needs_enough_fields(tmp_path):
    path = tmp_path / "fra.txt"
    path.write_text("a\tb\tc\nd\te\n", encoding="utf-8")
    with pytest.raises(ValueError) as error:
        nmt.read_tsv(path, columns=(2, 0))
    assert _message(error).startswith(
        f"{path}, line 2: expected at least 3 tab-separated fields (columns=(2, 0)), received 2: 'd\\te'")
    assert (error.value.needed, error.value.exact, error.value.malformed, error.value.total) == (3, False, 1, 2)
    for bad in [(0, 0), (0,), (-1, 1), ("0", "1"), 1, (0, 1, 2)]:
        with pytest.raises(ValueError, match=r"`columns` must be two different 0-based field numbers"):
            nmt.read_tsv(path, columns=bad)


# --------------------------------------------------------------------------------------------------
# Header rows: header="no" (a pair, the default), "yes" (always skipped), "auto" (skipped when it looks like one).


@pytest.mark.parametrize("row", [
    "source\ttarget", "Source\tTarget", "src\ttgt", "input\toutput", "English\tFrench", "en\tde", "eng\tfra",
    "text\ttranslation", "Deutsch\tEnglish", "src_en\ttgt_de", "English text\tFrench translation", "de\ten",
])
def test_header_rows_that_look_like_headers(row):
    assert nmt.data.looks_like_header(row.split("\t"))


@pytest.mark.parametrize("row", [
    "Go.\tVa !", "Hello\tBonjour", "no\tno", "cat\tKatze", "Guten Morgen.\tGood morning.", "source 1\ttarget 1",
    "English.\tFrench.", "English\tEnglish", "the source of the river is here\tdie Quelle", "Hi!\tSalut!",
])
def test_pairs_that_do_not_look_like_headers(row):
    assert not nmt.data.looks_like_header(row.split("\t"))


def test_read_tsv_header_no_yes_auto(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("\nEnglish\tFrench\nGo.\tVa !\nHi.\tSalut !\n", encoding="utf-8")  # blank line before it
    assert nmt.read_tsv(path).source == ["English", "Go.", "Hi."]  # the default: today's behaviour
    assert nmt.read_tsv(path, header="no").source == ["English", "Go.", "Hi."]
    assert nmt.read_tsv(path, header="yes").source == ["Go.", "Hi."]
    assert nmt.read_tsv(path, header="auto").source == ["Go.", "Hi."]
    pairs, skipped = nmt.data.read_tsv_with_header(path, header="auto")
    assert skipped == ["English", "French"] and pairs.target == ["Va !", "Salut !"]
    assert nmt.data.read_tsv_with_header(path)[1] is None

    plain = tmp_path / "plain.tsv"
    plain.write_text("Go.\tVa !\nHi.\tSalut !\n", encoding="utf-8")
    assert nmt.data.read_tsv_with_header(plain, header="auto") == (nmt.read_tsv(plain), None)
    pairs, skipped = nmt.data.read_tsv_with_header(plain, header="yes")  # yes: whatever the first line is
    assert skipped == ["Go.", "Va !"] and pairs.source == ["Hi."]
    with pytest.raises(ValueError, match=r"`header` must be one of no, yes, auto; received header='true'"):
        nmt.read_tsv(plain, header="true")


def test_read_tsv_header_with_columns_and_wrong_field_count(tmp_path):
    path = tmp_path / "fra.txt"
    path.write_text("english\tfrench\tattribution\n" + TATOEBA, encoding="utf-8")
    pairs, skipped = nmt.data.read_tsv_with_header(path, columns=(0, 1), header="auto")
    assert skipped == ["english", "french", "attribution"] and pairs.source == ["Go.", "Hi."]
    two = tmp_path / "two.tsv"
    two.write_text("source\ttarget\tnotes\neins\tone\n", encoding="utf-8")  # a header is skipped, not counted
    assert list(nmt.read_tsv(two, header="auto")) == [("eins", "one")]
    only = tmp_path / "only.tsv"
    only.write_text("source\ttarget\n\n", encoding="utf-8")
    with pytest.raises(ValueError) as error:
        nmt.read_tsv(only, header="auto")
    assert _message(error) == (f"{only} has a header row ('source\\ttarget') and no pairs: read_tsv expects one "
                               "`source<TAB>target` pair per line.")
