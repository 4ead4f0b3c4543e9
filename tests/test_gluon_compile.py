"""scripts/gluon_compile.py's code PTX (`--code-ptx`, `gluon_compile_check.sh PTX_DIR`), which checks a
refactor of the Gluon kernels without a GPU: two compilations that differ only in their debug
information (source lines, files, inline-scope labels, debug sections) give equal code PTX, and a
changed instruction does not."""

from __future__ import annotations

from tests.support.script_loader import load_script

PTX = """//
.visible .entry kernel(
{{
\t.loc\t1 20 5                          // pingpong.py:20:5
$L__tmp7:
\tadd.s32 \t%r1, %r2, %r3;
\t.loc\t6 {line} 31
\tmul.f32 \t%f1, %f2, %f3;
$L__BB0_2:
\tbra.uni \t$L__BB0_2;
}}
\t.file\t1 "/tmp/{tree}/glmcheck/kernels/gluon/pingpong.py"
\t.section\t.debug_abbrev
\t{{
.b8 1
\t}}
"""


def test_code_ptx_keeps_the_instructions_and_branch_labels_only():
    code = load_script("gluon_compile").code_ptx(PTX.format(line=36, tree="a"))
    assert code.splitlines() == ["//", ".visible .entry kernel(", "{", "\tadd.s32 \t%r1, %r2, %r3;",
                                 "\tmul.f32 \t%f1, %f2, %f3;", "$L__BB0_2:", "\tbra.uni \t$L__BB0_2;", "}"]


def test_code_ptx_of_a_moved_source_line_is_equal_and_of_a_changed_instruction_is_not():
    code_ptx = load_script("gluon_compile").code_ptx
    before = code_ptx(PTX.format(line=36, tree="a"))
    assert code_ptx(PTX.format(line=37, tree="b")) == before
    assert code_ptx(PTX.format(line=36, tree="a").replace("mul.f32", "add.f32")) != before
