"""Before a check's forwards: its Triton kernels compiled ahead, in a second process the command line starts
(`precompile`, on the calls `prediction` predicts from its options; `child` holds that process) and in threads after
the exact reference's forward (`compile_ahead`), and the bytecode of its imports kept where Python cannot write it
(`bytecode`). They change when things compile or load, never what a check computes."""
