"""scripts/sass_loops.py, which CI's Gluon compile check uses to fail a kernel whose consumer loops
spill registers: loops found from predicated backward branches, counted per opcode, and only the
loops that issue warpgroup MMAs reported as spilling consumer loops."""

from __future__ import annotations

from tests.support.script_loader import load_script

# A cuobjdump -sass shaped listing: a consumer loop (0x0100-0x0160) with one spill reload, a
# producer loop (0x0200-0x0240) with a spill store, a forward branch, and a barrier retry stub that
# branches back unpredicated (not a loop).
LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                   /* 0x00000a0000017a02 */
        /*0100*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2+URZ+0x100], R3 ;
        /*0110*/                   LDL.64 R16, [R1+0x8] ;
        /*0120*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0130*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;
        /*0140*/               @!P0 BRA 0x0300 ;
        /*0150*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0160*/                @P1 BRA 0x0100 ;
        /*0200*/                   LDGSTS.E.BYPASS.128 [R37], desc[UR60][R8.64] ;
        /*0210*/                   STL [R1+0x4], R9 ;
        /*0220*/                   LDGSTS.E.BYPASS.128 [R37+0x400], desc[UR60][R6.64] ;
        /*0240*/                @P2 BRA 0x0200 ;
        /*0300*/                   BRA 0x0150 ;
"""


def test_instructions_parse_offsets_and_text():
    found = load_script("sass_loops").instructions(LISTING)
    assert found[0] == (0x0000, "MOV R1, c[0x0][0x28]")
    assert found[-1] == (0x0300, "BRA 0x0150")
    assert len(found) == 13


def test_loops_are_the_predicated_backward_branches_with_their_counts():
    sass_loops = load_script("sass_loops")
    consumer, producer = sass_loops.loops(LISTING)
    assert (consumer.start, consumer.end, consumer.instructions) == (0x0100, 0x0160, 7)
    assert (consumer.wgmma, consumer.cp_async, consumer.local_loads, consumer.local_stores) == (2, 0, 1, 0)
    assert (producer.start, producer.end, producer.instructions) == (0x0200, 0x0240, 4)
    assert (producer.wgmma, producer.cp_async, producer.local_loads, producer.local_stores) == (0, 2, 0, 1)


def test_only_loops_that_issue_mmas_count_as_spilling_consumers():
    sass_loops = load_script("sass_loops")
    spilled = sass_loops.consumer_spills(sass_loops.loops(LISTING))
    assert [(loop.start, loop.spills) for loop in spilled] == [(0x0100, 1)]
    clean = LISTING.replace("LDL.64 R16, [R1+0x8]", "MOV R16, R17")
    assert sass_loops.consumer_spills(sass_loops.loops(clean)) == []
