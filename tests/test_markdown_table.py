"""harness/markdown_table.py (issue 49): the one table writer and the one table reader, each
against the other and against markdown-it's own idea of what is a table."""

from __future__ import annotations

from harness.markdown_table import cell, is_rule, row, rule, split_row, table, tables


def test_a_cell_is_one_line_with_its_pipes_escaped():
    assert cell("a | b\nc\t  d") == "a \\| b c d"
    assert cell(None) == "None" and cell(3) == "3"
    assert row(["x", "", 1]) == "| x |  | 1 |"  # an empty cell as every committed table writes it


def test_the_rule_row_in_both_layouts():
    assert rule(3) == "|---|---|---|"
    assert rule(3, "lr", spaced=True) == "| --- | ---: | --- |"
    assert rule(2, "c") == "|:---:|---|"
    assert table(["a", "b"], [[1, 2]], align="lr") == "| a | b |\n|---|---:|\n| 1 | 2 |"


def test_what_the_writer_writes_the_reader_reads_back():
    hostile = ["a | b", "`SELECT a || b FROM t`", "line one\nline two", "back\\slash", "tail \\", "**bold**"]
    text = "# Section\n\n" + table(["h1", "h2", "h3", "h4", "h5", "h6"], [hostile]) + "\n"
    [found] = tables(text)
    assert found.heading == "Section" and found.level == 1
    assert found.rows[0] == ["h1", "h2", "h3", "h4", "h5", "h6"]
    assert found.rows[1] == ["a | b", "`SELECT a || b FROM t`", "line one line two", "back\\slash", "tail \\",
                             "**bold**"]


def test_the_reader_takes_tables_from_markdown_its_blocks_only():
    text = ("## Fenced\n\n```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\n\n"
            "## No rule row\n\n| a | b |\n| 1 | 2 |\n\n"
            "## Real\n\n| a | b | c |\n|---|---|---|\n| 1 | 2 |\n| 1 | 2 | 3 | 4 |\n")
    [found] = tables(text)
    # markdown-it pads and cuts rows to the header's width; the reader keeps each row as written
    assert found.heading == "Real" and found.rows == [["a", "b", "c"], ["1", "2"], ["1", "2", "3", "4"]]


def test_split_row_and_the_rule_row():
    assert split_row("| `a | b` | c \\| d |") == ["`a | b`", "c | d"]
    assert split_row("a | b") == ["a", "b"]
    assert is_rule(["---", ":--:", " ---: "]) and not is_rule(["", ""]) and not is_rule(["--", "x"])
