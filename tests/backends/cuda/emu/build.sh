#!/bin/sh
# build.sh: builds tests/backends/cuda/test_cuda_ops.c against the CUDA backend compiled for the
# host emulator (emu/), so the backend's kernels run on a machine without a GPU. Test-only.
# usage: build.sh SRC_ROOT LIB_BUILD_DIR OUT_DIR [extra compiler flags, e.g. -fsanitize=thread]
# LIB_BUILD_DIR is a cmake build of this tree with loom_cpu, loom_op_suite and loom_util built.
# Runs: OUT_DIR/test_cuda_ops_emu [fp32|tf32|bf16], and under mpirun OUT_DIR/test_nccl_emu [own]
# with EMU_DEVICES=<ranks per node> (the emulator pretends that many GPUs). EMU_LIBS: the libraries
# loom_ckpt needs (HDF5), for test_needle_net_emu and OUT_DIR/loom_emu (the `loom` CLI on the
# emulated backend, where the tree has built loom_core).
set -eu
PIDS=""
bg() { "$@" & PIDS="$PIDS $!"; }
wait_all() { for p in $PIDS; do wait "$p"; done; PIDS=""; }
SRC=$1; LIBS=$2; OUT=$3; shift 3
EXTRA="$*"
EMU=$SRC/tests/backends/cuda/emu
mkdir -p "$OUT/src/backends/cuda" "$OUT/obj" "$OUT/pobj"
for f in "$SRC"/backends/cuda/*.cu; do
  python3 "$EMU/cu2cpp.py" "$f" "$OUT/src/backends/cuda/$(basename "$f" .cu).cpp"
done
for f in "$SRC"/backends/cuda/*.cuh; do
  python3 "$EMU/cu2cpp.py" "$f" "$OUT/src/backends/cuda/$(basename "$f")"
done
CXX=${CXX:-g++}; CC=${CC:-gcc}
INC="-I$EMU/include -I$OUT/src -I$SRC"
DEFS="-DLOOM_HAVE_CUDA -D_POSIX_C_SOURCE=200809L"
WARN="-Wall -Wextra -Wno-unused-parameter"

# The `loom` CLI (launch/*.c, the tree's core libraries) on the emulated backend, as OUT/loom_emu:
# LOOM_BACKEND=cuda runs a job's kernels through the emulator. Its comm layer: with the argument
# "mpi", the emulated NCCL over MPI (pobj/, built below); without, the tree's loom_comm. Only
# where the tree has built loom_core; called last.
emu_loom() {
  [ -f "$LIBS/core/libloom_core.a" ] || return 0
  LDEFS="$DEFS -DLOOM_BLAS_NAME=\"OpenBLAS\""
  COMM="$LIBS/parallel/libloom_comm.a"; CFLAGS_MPI=""; LIBS_MPI=""
  if [ "${1:-}" = mpi ]; then
    LDEFS="$LDEFS -DLOOM_HAVE_MPI -DLOOM_HAVE_NCCL"; COMM="$OUT/pobj/*.o"; CFLAGS_MPI=$MPIC; LIBS_MPI=$MPIL
  fi
  mkdir -p "$OUT/lobj"
  for f in "$SRC"/launch/*.c; do
    bg $CC -std=c11 -O1 -g $WARN $LDEFS $INC $CFLAGS_MPI $EXTRA -c "$f" -o "$OUT/lobj/$(basename "$f" .c).o"
  done
  wait_all
  $CXX $EXTRA -o "$OUT/loom_emu" "$OUT"/lobj/*.o "$OUT"/obj/*.o $COMM "$LIBS/core/libloom_core.a" \
    "$LIBS/core/libloom_model.a" "$LIBS/core/libloom_text.a" "$LIBS/checkpoints/libloom_ckpt.a" \
    "$LIBS/core/libloom_config.a" "$LIBS/backends/cpu/libloom_cpu.a" "$LIBS/base/libloom_util.a" \
    ${EMU_LIBS:-} $LIBS_MPI -lpcre2-8 -lutf8proc -lopenblas -lcjson -fopenmp -lpthread -lm -ldl
  echo "built $OUT/loom_emu"
}
for f in "$OUT"/src/backends/cuda/*.cpp; do
  bg $CXX -std=c++17 -O1 -g $WARN $DEFS $INC $EXTRA -c "$f" -o "$OUT/obj/$(basename "$f" .cpp).o"
done
bg $CXX -std=c++17 -O1 -g $WARN $INC $EXTRA -c "$EMU/emu_runtime.cpp" -o "$OUT/obj/emu_runtime.o"
bg $CXX -std=c++17 -O1 -g $WARN $INC $EXTRA -c "$EMU/emu_ctx.cpp" -o "$OUT/obj/emu_ctx.o"
for f in "$SRC"/backends/cuda/*.c; do # every host file of the backend (vtable, state, matmul)
  bg $CC -std=c11 -O1 -g $WARN $DEFS $INC $EXTRA -c "$f" -o "$OUT/obj/$(basename "$f" .c).o"
done
bg $CC -std=c11 -O1 -g $WARN $DEFS $INC $EXTRA -c "$SRC/backends/backend.c" -o "$OUT/obj/backend.o"
bg $CC -std=c11 -O1 -g $WARN $DEFS $INC $EXTRA -c "$SRC/backends/backend_ops.c" -o "$OUT/obj/backend_ops.o"
bg $CC -std=c11 -O1 -g $WARN $DEFS $INC $EXTRA -c "$SRC/tests/backends/cuda/test_cuda_ops.c" -o "$OUT/test_cuda_ops.o"
wait_all
$CXX $EXTRA -o "$OUT/test_cuda_ops_emu" "$OUT"/obj/*.o "$OUT/test_cuda_ops.o" \
  "$LIBS/tests/backends/cpu/libloom_op_suite.a" "$LIBS/backends/cpu/libloom_cpu.a" \
  "$LIBS/base/libloom_util.a" -lopenblas -lcjson -fopenmp -lpthread -lm
echo "built $OUT/test_cuda_ops_emu"

# The needle family on the emulated backend (tests/core/model/test_needle_net.c, its 3rd argument
# "cuda"): run by hand, minutes long (docs in emu/README.md); only where the tree has built it.
if [ -f "$LIBS/core/libloom_model.a" ]; then
  $CC -std=c11 -O1 -g $WARN $DEFS $INC $EXTRA -c "$SRC/tests/core/model/test_needle_net.c" -o "$OUT/test_needle_net.o"
  $CXX $EXTRA -o "$OUT/test_needle_net_emu" "$OUT"/obj/*.o "$OUT/test_needle_net.o" "$LIBS/core/libloom_model.a" \
    "$LIBS/checkpoints/libloom_ckpt.a" "$LIBS/core/libloom_config.a" "$LIBS/backends/cpu/libloom_cpu.a" \
    "$LIBS/base/libloom_util.a" ${EMU_LIBS:-} -lopenblas -lcjson -fopenmp -lpthread -lm -ldl
  echo "built $OUT/test_needle_net_emu"
fi

# The nccl transport over the emulated NCCL (MPI on host memory), with test_nccl.c.
command -v mpicc > /dev/null || { echo "no mpicc: test_nccl_emu not built"; emu_loom; exit 0; }
MPIC=$(mpicc --showme:compile); MPIL=$(mpicc --showme:link)
PDEFS="-DLOOM_HAVE_MPI -DLOOM_HAVE_NCCL -D_POSIX_C_SOURCE=200809L"
for f in comm comm_mpi comm_nccl; do
  bg $CC -std=c11 -O1 -g $WARN $PDEFS $INC $MPIC $EXTRA -c "$SRC/parallel/$f.c" -o "$OUT/pobj/$f.o"
done
bg $CC -std=c11 -O1 -g $WARN -D_POSIX_C_SOURCE=200809L $INC $EXTRA -c "$SRC/parallel/comm_self.c" -o "$OUT/pobj/comm_self.o"
bg $CC -std=c11 -O1 -g $WARN $INC $MPIC $EXTRA -c "$EMU/emu_nccl.c" -o "$OUT/pobj/emu_nccl.o"
bg $CC -std=c11 -O1 -g $WARN $DEFS $INC $EXTRA -c "$SRC/tests/backends/cuda/test_nccl.c" -o "$OUT/test_nccl.o"
wait_all
$CXX $EXTRA -o "$OUT/test_nccl_emu" "$OUT"/obj/*.o "$OUT"/pobj/*.o "$OUT/test_nccl.o" \
  "$LIBS/backends/cpu/libloom_cpu.a" "$LIBS/base/libloom_util.a" $MPIL -lopenblas -lcjson \
  -fopenmp -lpthread -lm
echo "built $OUT/test_nccl_emu"
emu_loom mpi
