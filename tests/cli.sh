#!/usr/bin/env bash
# cli.sh — end-to-end tests of the qvl CLI: help and usage errors, synth determinism and layouts, info, encode
# (on a tiny synthetic checkpoint with a generated .npy), and the one-line error contract.
# Environment: QVL_BIN (the qvl binary), QVL_SOURCE_DIR, QVL_BUILD_DIR (optional). Needs only bash and coreutils.
set -u

QVL=${QVL_BIN:-${QVL_BUILD_DIR:-build}/qvl}
if [[ ! -x $QVL ]]; then
    echo "cli.sh: qvl binary not found (QVL_BIN=$QVL)" >&2
    exit 1
fi
T_PREFIX=qvl-cli
# shellcheck source=shlib.bash
source "$(dirname "${BASH_SOURCE[0]}")/shlib.bash"

# The last command's stderr is exactly one line starting "qvl: error: ".
one_line_error() {
    local desc=$1
    if [[ $(wc -l <"$T/err") -eq 1 ]] && grep -q '^qvl: error: ' "$T/err"; then ok; else
        bad "$desc: stderr is not one 'qvl: error:' line:"
        sed 's/^/    /' "$T/err" | head -5 >&2
    fi
}

# stdout of the last command matches an extended regex.
out_has() { has "$1" "$T/out" "$2"; }

# write_npy PATH ROWS COLS: a float32 .npy whose row r holds the 4-byte pattern of byte 0x3c + r%4 (positive) or
# 0xbc + r%4 (negative), alternating: finite values near ±0.01..0.19, different per row, no python needed.
write_npy() {
    local path=$1 rows=$2 cols=$3
    local dict="{'descr': '<f4', 'fortran_order': False, 'shape': ($rows, $cols), }"
    local total=$(((10 + ${#dict} + 1 + 63) / 64 * 64))
    local hlen=$((total - 10))
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\x$(printf %02x $((hlen & 255)))\\x$(printf %02x $((hlen >> 8)))"
        printf '%s' "$dict"
        printf '%*s' $((total - 10 - ${#dict} - 1)) ''
        printf '\n'
        local r
        for ((r = 0; r < rows; r++)); do
            local b=$((r % 2 ? 0xbc + r % 4 : 0x3c + r % 4))
            head -c $((cols * 4)) /dev/zero | tr '\0' "\\$(printf %03o $b)"
        done
    } >"$path"
}

# ---- help, version, usage errors -----------------------------------------------------------------------------
expect 0 "--help" "$QVL" --help
out_has "--help" "Usage: qvl"
expect 0 "--version" "$QVL" --version
out_has "--version" "^qvl [0-9]+\.[0-9]+\.[0-9]+$"
for cmd in info encode synth bench; do
    expect 0 "$cmd --help" "$QVL" $cmd --help
    out_has "$cmd --help" "Usage: qvl $cmd"
done
expect 2 "no command" "$QVL"
expect 2 "unknown command" "$QVL" frobnicate
one_line_error "unknown command"
expect 2 "unknown global flag" "$QVL" --frobnicate
one_line_error "unknown global flag"
expect 2 "unknown synth flag" "$QVL" synth --frobnicate -o "$T/x"
one_line_error "unknown synth flag"
expect 2 "missing option value" "$QVL" encode --model
one_line_error "missing option value"
expect 2 "bad layout" "$QVL" synth --layout zip -o "$T/x"
one_line_error "bad layout"
expect 2 "bad preset" "$QVL" synth --preset nope -o "$T/x"
one_line_error "bad preset"
expect 2 "encode without args" "$QVL" encode
one_line_error "encode without args"
expect 2 "bad grid syntax" "$QVL" encode --model "$T" --pixels x.npy -o y.npy --grid 1,2
one_line_error "bad grid syntax"

# ---- synth: determinism and layouts --------------------------------------------------------------------------
expect 0 "synth hf" "$QVL" synth --preset tiny --seed 3 --layout hf -o "$T/hf"
expect 0 "synth hf again" "$QVL" synth --preset tiny --seed 3 --layout hf -o "$T/hf2"
for f in config.json preprocessor_config.json model.safetensors; do
    if cmp -s "$T/hf/$f" "$T/hf2/$f"; then ok; else bad "synth determinism: $f differs"; fi
done
expect 0 "synth seed 4" "$QVL" synth --preset tiny --seed 4 --layout hf -o "$T/hf4"
if cmp -s "$T/hf/model.safetensors" "$T/hf4/model.safetensors"; then bad "seed does not change weights"; else ok; fi

declare -A files=(
    [hf]="config.json preprocessor_config.json model.safetensors"
    [mlx]="config.json preprocessor_config.json model.safetensors"
    [sidecar]="config.json preprocessor_config.json model.safetensors optiq/optiq_vision.safetensors"
    [sharded]="config.json preprocessor_config.json model.safetensors.index.json model-00001-of-00003.safetensors model-00002-of-00003.safetensors model-00003-of-00003.safetensors"
    [nested]="config.json preprocessor_config.json model.safetensors"
)
for layout in mlx sidecar sharded nested; do
    expect 0 "synth $layout" "$QVL" synth --preset tiny --seed 3 --layout $layout -o "$T/$layout"
done
for layout in hf mlx sidecar sharded nested; do
    for f in ${files[$layout]}; do
        if [[ -s $T/$layout/$f ]]; then ok; else bad "synth $layout: missing $f"; fi
    done
done
if grep -q '"model.visual.blocks.0.attn.qkv.weight"' "$T/sharded/model.safetensors.index.json"; then ok; else
    bad "sharded index lacks the tower"
fi
expect 0 "synth f32 depth 2" "$QVL" synth --preset tiny-3.5 --dtype f32 --depth 2 --layout hf -o "$T/d2"
expect 1 "synth deepstack on qwen3.5" "$QVL" synth --preset tiny-3.5 --deepstack 1 -o "$T/bad35"
one_line_error "synth deepstack on qwen3.5"

# ---- info ----------------------------------------------------------------------------------------------------
expect 0 "info hf" "$QVL" info --model "$T/hf"
out_has "info tensor count" "^tensors: +69$"
out_has "info family" "^family: +qwen3_vl$"
out_has "info deepstack" "^deepstack: +1,3$"
out_has "info prefix" "^prefix: +model\.visual\.$"
out_has "info conv layout" "^conv_layout: +hf$"
fp=$(grep '^fingerprint:' "$T/out" | awk '{print $2}')
if [[ $fp =~ ^[0-9a-f]{32}$ ]]; then ok; else bad "info fingerprint: '$fp'"; fi
declare -A want_source=([mlx]=single [sidecar]=sidecar [sharded]=sharded [nested]=single)
declare -A want_prefix=([mlx]='vision_tower\.' [sidecar]='vision_tower\.' [sharded]='model\.visual\.' [nested]='model\.language_model\.visual\.')
for layout in mlx sidecar sharded nested; do
    expect 0 "info $layout" "$QVL" info --model "$T/$layout"
    out_has "info $layout tensors" "^tensors: +69$"
    out_has "info $layout source" "^source: +${want_source[$layout]}"
    out_has "info $layout prefix" "^prefix: +${want_prefix[$layout]}$"
    # The fingerprint covers canonical names, dtypes, shapes (HF conv layout) and bytes: the same in every layout.
    out_has "info $layout fingerprint" "^fingerprint: +$fp$"
done
# --json: one object, the same values (cJSON's unformatted print: "key":value, no spaces).
expect 0 "info json" "$QVL" info --model "$T/sharded" --json
if [[ $(wc -l <"$T/out") -eq 1 ]]; then ok; else bad "info --json: $(wc -l <"$T/out") lines"; fi
out_has "info json fingerprint" "\"fingerprint\":\"$fp\""
out_has "info json deepstack" '"n_deepstack":2,"deepstack_index":\[1,3\]'
out_has "info json numbers" '"n_tensors":69,.*"n_files":[0-9]+,'
out_has "info json type" '"model_type":"qwen3_vl"'
out_has "info json source" '"source":"sharded","n_files":2,'
for fmt in "" --json; do # output that cannot be written is an error, not a silent exit 0
    if "$QVL" info --model "$T/hf" $fmt >/dev/full 2>"$T/err"; then bad "info $fmt to /dev/full: exit 0"
    elif grep -q 'writing to stdout' "$T/err"; then ok; else bad "info $fmt to /dev/full: $(cat "$T/err")"; fi
done
out_has "info json bf16 kernels" '"bf16_kernels":(null|"[a-z0-9-]+")'
out_has "info json auto precision" '"auto_precision":"(f32 [(]|bf16 on [a-z0-9]+["( ])'
expect 0 "info qwen3.5 depth 2" "$QVL" info --model "$T/d2"
out_has "info qwen3.5 tensors" "^tensors: +33$"
out_has "info qwen3.5 deepstack" "^deepstack: +none$"
expect 0 "info qwen3.5 json" "$QVL" info --model "$T/d2" --json
out_has "info qwen3.5 json deepstack" '"n_deepstack":0,"deepstack_index":\[\],'
expect 1 "info missing dir" "$QVL" info --model "$T/nope"
one_line_error "info missing dir"

# ---- encode --------------------------------------------------------------------------------------------------
write_npy "$T/px16.npy" 16 1536
expect 0 "encode npy" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/out.npy" --threads 2
out_has "encode report item" "item 0: grid 1x4x4.* 4 tokens"
out_has "encode report output" "output: .*out\.npy"
# 4 tokens × 96 floats after a 128-byte header
if [[ $(stat -c %s "$T/out.npy" 2>/dev/null) -eq $((128 + 4 * 96 * 4)) ]]; then ok; else bad "encode npy: output size"; fi

expect 0 "encode threads 1" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/out1.npy" --threads 1
if cmp -s "$T/out.npy" "$T/out1.npy"; then ok; else bad "encode: output depends on the thread count"; fi
# Forced kernel sets: each one this CPU runs encodes (same shapes); an unknown set is a usage error. The library's
# own choice (qvl info) says which run here: AVX-512 implies AVX2.
auto_isa=$("$QVL" info --model "$T/hf" | awk '$1 == "kernels:" {print $2}')
for isa in avx2 avx512; do
    if [[ $auto_isa == avx512 || $auto_isa == "$isa" ]]; then
        expect 0 "encode --isa $isa" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/isa.npy" --isa $isa
        if [[ $(stat -c %s "$T/isa.npy" 2>/dev/null) -eq $((128 + 4 * 96 * 4)) ]]; then ok; else bad "encode --isa $isa: output size"; fi
    fi
done
expect 2 "encode --isa bogus" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/isa.npy" --isa sse9
one_line_error "encode --isa bogus"
# Precision: f32 is the default path, bit for bit; bf16 encodes (the AVX512-BF16 kernels or, without them, the
# portable bf16 reference) to outputs of the same shape that are close to, not equal to, f32's; unknown values
# are usage errors. qvl info names the bf16 kernel set.
expect 0 "encode --precision f32" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/p32.npy" --precision f32
if cmp -s "$T/out.npy" "$T/p32.npy"; then ok; else bad "encode --precision f32 differs from the default"; fi
expect 0 "encode --precision bf16" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/p16.npy" --precision bf16
if [[ $(stat -c %s "$T/p16.npy" 2>/dev/null) -eq $((128 + 4 * 96 * 4)) ]]; then ok; else bad "encode --precision bf16: output size"; fi
if cmp -s "$T/out.npy" "$T/p16.npy"; then bad "encode --precision bf16 gave the f32 bits"; else ok; fi
expect 0 "encode --precision auto" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/pa.npy" --precision auto
expect 2 "encode --precision bogus" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/pa.npy" --precision fp8
one_line_error "encode --precision bogus"
expect 0 "info bf16 kernels" "$QVL" info --model "$T/hf"
out_has "info bf16 kernels" "^bf16 kernels: +(amx|avx512bf16|none)"
out_has "info amx" "^amx: +(usable|absent|present)"
# --isa amx: bf16 on AMX tiles where usable; refused with the reason elsewhere, and always for f32
if grep -q '^amx: *usable' "$T/out"; then amx_here=1; else amx_here=0; fi
expect 1 "encode --isa amx --precision f32" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/pa.npy" --isa amx --precision f32
one_line_error "encode --isa amx --precision f32"
if [[ $amx_here == 1 ]]; then
    expect 0 "encode --isa amx" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/pamx.npy" --isa amx --precision bf16
else
    expect 1 "encode --isa amx (no AMX here)" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/pamx.npy" --isa amx --precision bf16
    one_line_error "encode --isa amx (no AMX here)"
fi
expect 0 "encode mlx layout" "$QVL" encode --model "$T/sidecar" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/outs.npy"
if cmp -s "$T/out.npy" "$T/outs.npy"; then ok; else bad "encode: sidecar (MLX) output differs from hf"; fi

expect 0 "encode two items + stages" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,2,2 --grid 1,2,6 \
    -o "$T/out.safetensors" --stages --pos-mode linspace
out_has "encode two items" "item 1: grid 1x2x6.* 3 tokens"
hdr=$(head -c 4096 "$T/out.safetensors" | tr -d '\0')
for name in merged deepstack0 deepstack1 grid_thw patch pos blk0 blk3; do
    if [[ $hdr == *"\"$name\""* ]]; then ok; else bad "encode --stages: no tensor $name in the output"; fi
done

# ---- encode errors -------------------------------------------------------------------------------------------
expect 1 "encode missing model" "$QVL" encode --model "$T/nope" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/e.npy"
one_line_error "encode missing model"
expect 1 "encode odd grid" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,3,4 -o "$T/e.npy"
one_line_error "encode odd grid"
expect 1 "encode rows/grid mismatch" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,6 -o "$T/e.npy"
one_line_error "encode rows/grid mismatch"
expect 1 "encode no grid" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" -o "$T/e.npy"
one_line_error "encode no grid"
write_npy "$T/px_narrow.npy" 16 100
expect 1 "encode wrong row length" "$QVL" encode --model "$T/hf" --pixels "$T/px_narrow.npy" --grid 1,4,4 -o "$T/e.npy"
one_line_error "encode wrong row length"
printf 'not an array' >"$T/junk.npy"
expect 1 "encode junk input" "$QVL" encode --model "$T/hf" --pixels "$T/junk.npy" --grid 1,4,4 -o "$T/e.npy"
one_line_error "encode junk input"
if [[ ! -e $T/e.npy ]]; then ok; else bad "a failed encode left an output file"; fi

# ---- limits and non-finite values (docs/SECURITY.md) ------------------------------------------------------------
# A grid far past the per-item limit is refused from the grid alone, before the rows are read.
expect 2 "encode huge grid" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,16384,16384 -o "$T/e.npy"
one_line_error "encode huge grid"
has "huge grid names the limit" "$T/err" "268435456 patch rows.*max_item_patches = 262144.*--limit max_item_patches=N"
expect 2 "encode grid over a lowered limit" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 \
    --limit max_item_patches=8 -o "$T/e.npy"
has "lowered limit" "$T/err" "16 patch rows.*max_item_patches = 8"
expect 0 "encode under a raised limit" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 \
    --limit max_call_patches=16 -o "$T/lim.npy"
# The --pixels file is under the limits too: its size before it is read, its header's rows before they are allocated.
expect 1 "pixels over max_input_bytes" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 \
    --limit max_input_bytes=1000 -o "$T/e.npy"
has "pixels file size names the limit" "$T/err" "px16.npy: 98432 bytes, more than the 1000 allowed.*--limit max_input_bytes=N"
expect 1 "pixels rows over max_call_patches" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" \
    --limit max_call_patches=8 -o "$T/e.npy"
has "pixels rows name the limit" "$T/err" "claims 16 pixel rows.*max_call_patches = 8"
expect 2 "bad --limit name" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 --limit max_bogus=1 -o "$T/e.npy"
one_line_error "bad --limit name"
expect 2 "--limit 0" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 --limit max_jpeg_scans=0 -o "$T/e.npy"
# --min-pixels above --max-pixels is refused as the config parser refuses it; --size above the budget too.
expect 2 "min above max pixels" "$QVL" encode --model "$T/hf" --min-pixels 100000 --max-pixels 50000 x.png -o "$T/e.st"
one_line_error "min above max pixels"
has "min above max names both" "$T/err" "error: --min-pixels 100000 is above --max-pixels 50000"
expect 2 "size above max pixels" "$QVL" encode --model "$T/hf" --size 4096x4096 --max-pixels 50000 x.png -o "$T/e.st"
has "size above the budget" "$T/err" "error: --size 4096x4096 is 16777216 pixels, above --max-pixels 50000"
# NaN and infinity in --pixels rows: refused, naming the row and column, with a status of their own.
write_npy "$T/px_nan.npy" 16 1536
nan_dict="{'descr': '<f4', 'fortran_order': False, 'shape': (16, 1536), }"
hdr_bytes=$(((10 + ${#nan_dict} + 1 + 63) / 64 * 64))
off=$((hdr_bytes + (3 * 1536 + 7) * 4))
printf '\x00\x00\xc0\x7f' | dd of="$T/px_nan.npy" bs=1 seek=$off conv=notrunc status=none
expect 1 "encode NaN rows" "$QVL" encode --model "$T/hf" --pixels "$T/px_nan.npy" --grid 1,4,4 -o "$T/e.npy"
one_line_error "encode NaN rows"
has "NaN row named" "$T/err" "row 3, column 7 is NaN"
if [[ ! -e $T/e.npy ]]; then ok; else bad "a NaN input left an output file"; fi

# ---- bench: every case kind once, on the tiny model (timings are not checked, only that each case ran) ---------
# The peak is that of the unit the backend runs on: the f32 FMA, VDPBF16PS or the AMX tiles; none for the portable
# sets (plain C: arm64, or x86 without AVX2; portable-bf16 on x86 without AVX512-BF16), which print no %peak.
# bench_peak DESC: checks $T/out's header, image row and per-case peak line against its backend line.
bench_peak() {
    local unit pct='[0-9.]+%' around="GFLOP total; peak [0-9.]+ before, [0-9.]+ after$"
    case $(sed -n 's/^precision: [a-z0-9]* (backend \([a-z0-9-]*\))$/\1/p' "$T/out") in
        avx512bf16) unit="bf16 VDPBF16PS" ;;
        amx) unit="bf16 TDPBF16PS" ;;
        avx2 | avx512) unit="f32 FMA" ;;
        portable | portable-bf16) unit="" ;;
        *) unit="(no backend line)" ;;
    esac
    if [[ -n $unit ]]; then
        out_has "$1 header" "^threads: 1, kernels: [a-z0-9]+, measured $unit peak: [0-9.]+ GFLOP/s"
    else
        out_has "$1 header" "^threads: 1, kernels: [a-z0-9]+, no peak: the portable kernels"
        pct='-' around="GEMM [0-9.]+ GFLOP/s \(-\), attention [0-9.]+ GFLOP/s \(-\), [0-9.]+ GFLOP total$"
    fi
    out_has "$1 image case" "^image 32² +4 +1 +[0-9.]+ +[0-9.]+ +$pct \\|"
    out_has "$1 peak around a case" "$around"
}
expect 0 "bench tiny" "$QVL" bench --model "$T/hf" --sizes 32 --video 2x32 --batch 2x32 --repeat 1 --threads 1
bench_peak "bench"
out_has "bench video case" "^video 2x32² +4 +1 "
out_has "bench batch case" "^batch 2x32² +8 +2 "
out_has "bench peak RSS" "^peak RSS: [0-9.]+ MiB"
expect 0 "bench bf16" "$QVL" bench --model "$T/hf" --sizes 32 --video 0x0 --batch 0x0 --repeat 1 --threads 1 \
    --precision bf16
bench_peak "bench bf16"
expect 2 "bench bad size" "$QVL" bench --model "$T/hf" --sizes 33
one_line_error "bench bad size"
expect 2 "bench no model" "$QVL" bench
one_line_error "bench no model"
# ---- outputs: never through a planted link, never over a special file, an input or the model ---------------------
# A symlink at the old fixed temporary name "OUT.tmp" is not followed: the file it points to keeps its bytes.
printf 'keep' >"$T/victim"
ln -s "$T/victim" "$T/planted.npy.tmp"
expect 0 "encode past a planted .tmp link" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/planted.npy"
if [[ $(cat "$T/victim") == keep && -f $T/planted.npy && ! -L $T/planted.npy ]]; then ok; else bad "planted .tmp link followed"; fi
ln -s "$T/victim" "$T/planted.safetensors.tmp"
expect 0 "encode st past a planted .tmp link" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/planted.safetensors"
if [[ $(cat "$T/victim") == keep ]]; then ok; else bad "planted .tmp link followed (safetensors)"; fi
if ls -A "$T" | grep -q '^\.'; then bad "a temporary file was left in $T"; else ok; fi
# Special files, the input and the model's files as -o: a usage error before any work, naming both; nothing changes.
# (/dev/null through a link of our own: were it not refused, only the link would be replaced.)
mkfifo "$T/fifo.npy" && ln -s "$T/fifo.npy" "$T/fifolink.npy" && ln -s /dev/null "$T/null.npy"
cp "$T/px16.npy" "$T/px16.keep" && cp "$T/hf/model.safetensors" "$T/model.keep" && cp "$T/hf/config.json" "$T/config.keep"
for o in "$T/fifo.npy" "$T/fifolink.npy" "$T/null.npy"; do
    expect 2 "-o $o" timeout 10 "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$o"
    has "-o $o named" "$T/err" "$o: exists and is a (FIFO|device)"
    one_line_error "-o $o"
done
[[ -p $T/fifo.npy && -L $T/fifolink.npy && -L $T/null.npy ]] && ok || bad "a special file was replaced"
expect 2 "-o the input" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/px16.npy"
has "-o the input named" "$T/err" "error: -o $T/px16.npy is the input $T/px16.npy"
for f in model.safetensors config.json; do
    expect 2 "-o the model's $f" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/hf/$f"
    has "-o the model's $f named" "$T/err" "error: -o $T/hf/$f is $T/hf/$f, a file of the model"
done
ln -s "$T/hf/model.safetensors" "$T/modellink.safetensors"
expect 2 "-o a link to the model" "$QVL" encode --model "$T/hf" --pixels "$T/px16.npy" --grid 1,4,4 -o "$T/modellink.safetensors"
has "-o a link to the model named" "$T/err" "a file of the model"
cmp -s "$T/px16.npy" "$T/px16.keep" && cmp -s "$T/hf/model.safetensors" "$T/model.keep" &&
    cmp -s "$T/hf/config.json" "$T/config.keep" && ok || bad "an input or model file changed"
# A FIFO as --pixels or as the model's config.json fails at once, naming it.
expect 1 "--pixels a FIFO" timeout 10 "$QVL" encode --model "$T/hf" --pixels "$T/fifo.npy" --grid 1,4,4 -o "$T/f.npy"
has "--pixels a FIFO named" "$T/err" "fifo.npy: not a regular file \(it is a FIFO\)"
cp -r "$T/hf" "$T/hffifo" && rm "$T/hffifo/config.json" && mkfifo "$T/hffifo/config.json"
expect 1 "config.json a FIFO" timeout 10 "$QVL" info --model "$T/hffifo"
has "config.json a FIFO named" "$T/err" "config.json: not a regular file \(it is a FIFO\)"

expect 1 "bench missing model" "$QVL" bench --model "$T/nope"
one_line_error "bench missing model"

echo "cli.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
