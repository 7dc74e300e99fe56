#!/usr/bin/env bash
# cli_media.sh — `qvl encode` on files: images and videos in one call, per-input outputs, a bad input that fails
# only itself (exit 3, every good input still written), --preprocess-only, preprocessing overrides, and the
# progress lines. Environment: QVL_BIN, QVL_SOURCE_DIR. Needs only bash and coreutils.
set -u

QVL=${QVL_BIN:-build/qvl}
SRC=${QVL_SOURCE_DIR:-.}
T_PREFIX=qvl-media
if [[ ${QVL_MEDIA:-1} == 0 || ${QVL_VIDEO:-1} == 0 ]]; then # its cases mix image and video files
    echo "cli_media.sh: skipped, built without $([[ ${QVL_MEDIA:-1} == 0 ]] && echo "image decoders (QVL_MEDIA=OFF)" ||
        echo "FFmpeg (QVL_VIDEO=OFF)")"
    exit 77
fi
# shellcheck source=shlib.bash
source "$(dirname "${BASH_SOURCE[0]}")/shlib.bash"
# Names of the tensors in a safetensors file (its JSON header), one per line.
tensors() { head -c 65536 "$1" | tr ',' '\n' | grep -aEo '"[a-z0-9_.]+":\{"dtype"' | cut -d'"' -f2 | sort; }

"$QVL" synth --preset tiny --seed 1 -o "$T/m" >/dev/null || bad "synth"
PHOTO=$SRC/tests/data/photos/rocket.jpg
PNG=$SRC/tests/data/photos/chelsea.png
VIDEO=$(ls "$SRC"/tests/data/video/*.mp4 | head -n 1)
FRAMES=$T/frames # frames of one size (the corpus directory also holds a mismatched one)
mkdir -p "$FRAMES" && cp "$SRC"/tests/data/video/frames/video_frame_[0-4].png "$FRAMES"/

# Images, a video and a frame directory in one call.
expect 0 "encode images and videos" "$QVL" encode --model "$T/m" "$PHOTO" "$PNG" "$VIDEO" "$FRAMES" -o "$T/o.safetensors"
has "report" "$T/out" '^item 0: .*rocket.jpg \(image 640x427, 1 frame\): grid 1x26x40, 260 tokens'
has "report" "$T/out" '^item 2: .*\(video '
has "report" "$T/out" '^item 3: .*\(frames '
has "report" "$T/out" '^4 of 4 inputs encoded'
# The encode time is the plan's, read after the encode (it once stayed at the planning-time 0).
if grep -q '^item 0: .*encode 0\.0 ms' "$T/out"; then bad "item 0 reports no encode time"; else ok; fi
has "progress" "$T/err" '^\[1/4\] .*rocket.jpg: image 640x427 -> grid 1x26x40, 260 tokens'
has "report's timings" "$T/out" '^item 0: .*, decode [0-9.]+ ms, preprocess [0-9.]+ ms, encode [0-9.]+ ms$'
# On a terminal the report alone: the progress lines said the same a second time (script(1) gives it one).
if [[ ${QVL_CROSS:-0} == 0 ]] && command -v script >/dev/null && script -qec true /dev/null >/dev/null 2>&1; then
    if script -qec "'$QVL' encode --model '$T/m' '$PHOTO' -o '$T/tty.safetensors'" /dev/null >"$T/tty" 2>&1; then
        ok
    else
        bad "terminal: the encode failed: $(head -c 300 "$T/tty")"
    fi
    has "terminal: the report" "$T/tty" '^item 0: .*rocket.jpg'
    if grep -q '^\[1/1\]' "$T/tty"; then bad "terminal: progress lines beside the report"; else ok; fi
else
    echo "cli_media.sh: no terminal to be had here (script(1) missing or without a pty); the terminal case not run"
fi
tensors "$T/o.safetensors" >"$T/names"
for want in item0.merged item0.deepstack0 item0.deepstack1 item1.merged item2.merged item3.deepstack1 grid_thw; do
    has "tensor $want" "$T/names" "^$want\$"
done

# A video encoded as a stream (--max-batch-rows 16: pieces of one temporal patch, each written to the file as it is
# done) holds the bytes of its rows encoded whole (--preprocess-only, then --pixels: one pass); the data regions
# (the merger's output, each DeepStack feature, grid_thw, in that order in both) compared byte for byte. The edit
# list's clip ends before its header's frame count after its first part is written: it is read again whole.
data_of() { local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' '); tail -c +$((9 + n)) "$1"; }
for clip in video_h264_bframes.mkv video_editlist.mp4; do
    expect 0 "stream $clip" "$QVL" encode --model "$T/m" --max-batch-rows 16 --video-max-pixels 65536 \
        "$SRC/tests/data/video/$clip" -o "$T/st.safetensors"
    if [[ $clip == video_editlist.mp4 ]]; then
        has "read again whole" "$T/out" '^item 0: .*, decode [0-9.]+ ms, preprocess [0-9.]+ ms, encode [0-9.]+ ms$'
    else
        has "streamed" "$T/out" '^item 0: .*grid 4x4x4, 16 tokens, streamed: decode \+ preprocess \+ encode [0-9.]+ ms$'
    fi
    expect 0 "rows of $clip" "$QVL" encode --preprocess-only --video-max-pixels 65536 "$SRC/tests/data/video/$clip" \
        -o "$T/rows.safetensors"
    expect 0 "whole $clip" "$QVL" encode --model "$T/m" --pixels "$T/rows.safetensors" -o "$T/wh.safetensors"
    if cmp -s <(data_of "$T/st.safetensors") <(data_of "$T/wh.safetensors"); then ok; else
        bad "$clip: the streamed encode's tensors differ from the whole encode's"
    fi
    # --preprocess-only streams too: its rows written a temporal patch at a time are those of one piece
    expect 0 "rows of $clip in pieces" "$QVL" encode --preprocess-only --max-batch-rows 16 --video-max-pixels 65536 \
        "$SRC/tests/data/video/$clip" -o "$T/rows16.safetensors"
    if [[ $clip == video_editlist.mp4 ]]; then
        has "rows read again whole" "$T/out" '^item 0: .*, decode [0-9.]+ ms, preprocess [0-9.]+ ms$'
    else
        has "rows streamed" "$T/out" '^item 0: .*grid 4x4x4, 16 tokens, streamed: decode \+ preprocess [0-9.]+ ms$'
    fi
    if cmp -s <(data_of "$T/rows16.safetensors") <(data_of "$T/rows.safetensors"); then ok; else
        bad "$clip: the rows written in pieces differ from the rows of one piece"
    fi
done
expect 2 "--max-batch-rows with --pixels" "$QVL" encode --model "$T/m" --pixels "$T/rows.safetensors" \
    --max-batch-rows 16 -o "$T/wh.safetensors"
has "--max-batch-rows with --pixels" "$T/err" 'max-batch-rows is for file inputs'

# One bad file fails only itself: exit 3, the others still written, the reason named.
expect 3 "bad input" "$QVL" encode --model "$T/m" "$PHOTO" "$SRC/tests/data/bad/video_not_video.mp4" "$PNG" -o "$T/p.safetensors"
has "failed item" "$T/out" '^item 1: .*video_not_video.mp4: FAILED: '
has "partial" "$T/out" '^2 of 3 inputs encoded'
tensors "$T/p.safetensors" >"$T/names"
has "good kept" "$T/names" '^item0.merged$'
has "good kept" "$T/names" '^item2.merged$'
if grep -q '^item1\.' "$T/names"; then bad "bad item has tensors"; else ok; fi

# A .npy output is for --pixels (one array): file inputs with one are a usage error, before any work (a
# safetensors file was written under the .npy name).
expect 2 "file inputs to .npy" "$QVL" encode --model "$T/m" "$PHOTO" -o "$T/photo.npy"
has "npy refused" "$T/err" 'photo.npy: file inputs write a safetensors file'
if [[ ! -e $T/photo.npy ]]; then ok; else bad "a refused .npy output was written"; fi

# Everything bad: exit 1, and no output file (nor a temporary) is left.
expect 1 "all bad" "$QVL" encode --model "$T/m" "$T/missing.jpg" -o "$T/q.safetensors"
has "missing file" "$T/out" 'FAILED: .*missing.jpg'
if [[ -e "$T/q.safetensors" ]] || ls -A "$T" | grep -q '^\.q\.safetensors'; then bad "output left after all inputs failed"; else ok; fi

# Per-input metadata: path, status and grid; for a video the sampled frames, source fps and the timestamps.
meta() { head -c 65536 "$1" | tr ',' '\n'; }
meta "$T/o.safetensors" >"$T/meta"
has "item path" "$T/meta" '"item0.path":".*rocket.jpg"'
has "item status" "$T/meta" '"item2.status":"ok"'
has "video fps" "$T/meta" '"item2.source_fps":"[0-9.]+"'
has "video indices" "$T/meta" '"item2.frame_indices":"\[0'
has "video timestamps" "$T/meta" '"item2.timestamps":"\[[0-9.]+'
has "fingerprint" "$T/meta" '"fingerprint":"[0-9a-f]{32}"'
has "cache key" "$T/meta" '"item0.key":"[0-9a-f]{64}"'
# Numbers as Python's repr writes them: a 30 fps source is "30.0" (it was "3e+01": the shortest %g that read back).
expect 0 "a 30 fps video" "$QVL" encode -q --model "$T/m" "$SRC/tests/data/video/video_testsrc_30.mp4" -o "$T/v30.safetensors"
meta "$T/v30.safetensors" >"$T/meta30"
has "fps as repr" "$T/meta30" '"item0.source_fps":"30\.0"'
has "timestamps as repr" "$T/meta30" '"item0.timestamps":"\[0\.3333333333333333$'
meta "$T/p.safetensors" >"$T/meta"
has "item error" "$T/meta" '"item1.error":".*video_not_video.mp4'

# A transparent image: composited onto white by default, alpha dropped with --alpha drop (different rows).
RGBA=$SRC/tests/data/images/png_rgba.png
if [[ -f "$RGBA" ]]; then
    expect 0 "alpha white" "$QVL" encode --preprocess-only "$RGBA" -o "$T/aw.safetensors"
    expect 0 "alpha drop" "$QVL" encode --preprocess-only --alpha drop "$RGBA" -o "$T/ad.safetensors"
    if cmp -s "$T/aw.safetensors" "$T/ad.safetensors"; then bad "--alpha drop changed nothing"; else ok; fi
    has "alpha metadata" <(meta "$T/ad.safetensors") '"alpha":"drop"'
fi
expect 2 "bad alpha" "$QVL" encode --alpha black --model "$T/m" "$PNG" -o "$T/x.safetensors"

# Same image through both resize paths and an exact size: grids as smart_resize / --size say.
expect 0 "pil path" "$QVL" encode --model "$T/m" --resize pil "$PHOTO" -o "$T/r.safetensors"
has "pil grid" "$T/out" 'grid 1x26x40'
expect 0 "exact size" "$QVL" encode --model "$T/m" --size 224x320 "$PHOTO" -o "$T/s.safetensors"
has "size grid" "$T/out" 'grid 1x14x20, 70 tokens'
expect 0 "max pixels" "$QVL" encode --model "$T/m" --max-pixels 50000 "$PHOTO" -o "$T/t.safetensors"
has "budget grid" "$T/out" 'grid 1x10x16, 40 tokens'
expect 2 "bad size" "$QVL" encode --model "$T/m" --size 100x100x3 "$PHOTO" -o "$T/u.safetensors"
expect 1 "size not a multiple" "$QVL" encode --model "$T/m" --size 100x100 "$PHOTO" -o "$T/u.safetensors"

# Video sampling overrides.
expect 0 "num frames" "$QVL" encode --model "$T/m" --num-frames 6 "$VIDEO" -o "$T/v.safetensors"
has "six frames" "$T/out" '\(video [0-9]+x[0-9]+, 6 frames\): grid 3x'

# transformers' per-frame cap: two frames of the photo at 16 tokens a frame (16384 pixels each) instead of the clip
# budget spent on them (grid 1x26x40 without it).
mkdir "$T/pf"
cp "$PHOTO" "$T/pf/a.jpg"
cp "$PHOTO" "$T/pf/b.jpg"
expect 0 "uncapped frames" "$QVL" encode --preprocess-only "$T/pf" -o "$T/pf0.safetensors"
has "uncapped grid" "$T/out" '\(frames 640x427, 2 frames\): grid 1x26x40'
expect 0 "capped frames" "$QVL" encode --preprocess-only --cap-pixels-per-frame --max-video-tokens 16 "$T/pf" -o "$T/pf1.safetensors"
has "capped grid" "$T/out" '\(frames 640x427, 2 frames\): grid 1x6x8, 12 tokens'
# the clip budget from the command line: the cap above gave the two frames 32768 pixels; so does this
expect 0 "video max pixels" "$QVL" encode --preprocess-only --video-max-pixels 32768 "$T/pf" -o "$T/pf3.safetensors"
has "clip budget grid" "$T/out" '\(frames 640x427, 2 frames\): grid 1x6x8, 12 tokens'
expect 2 "video min above max" "$QVL" encode --preprocess-only --video-min-pixels 9000 --video-max-pixels 8000 "$T/pf" -o "$T/pf3.safetensors"
expect 2 "bad max video tokens" "$QVL" encode --preprocess-only --max-video-tokens 0 "$T/pf" -o "$T/pf2.safetensors"

# --preprocess-only writes pixel rows, and they are what an encode of the same rows gives.
expect 0 "preprocess only" "$QVL" encode --preprocess-only --model "$T/m" "$PNG" -o "$T/pp.safetensors"
tensors "$T/pp.safetensors" >"$T/names"
has "pixel rows" "$T/names" '^item0.pixel_values$'
expect 0 "no model needed" "$QVL" encode --preprocess-only "$PNG" -o "$T/pp2.safetensors"
if cmp -s "$T/pp.safetensors" "$T/pp2.safetensors"; then ok; else bad "preprocess-only output depends on --model"; fi
# ... and --pixels encodes them as they are (test_read_rows: the rows read are the file's, in input order), a failed
# input in between leaving no gap: the grids of the photo and the video, one after the other.
expect 3 "preprocess three, one bad" "$QVL" encode --preprocess-only "$PHOTO" "$T/missing.png" "$VIDEO" -o "$T/pp3.safetensors"
expect 0 "encode them with --pixels" "$QVL" encode --model "$T/m" --pixels "$T/pp3.safetensors" -o "$T/px3.safetensors"
has "rows: the photo" "$T/out" '^item 0: grid 1x26x40, 1040 patches'
has "rows: the video" "$T/out" '^item 1: grid [0-9]+x[0-9]+x[0-9]+, [0-9]+ patches, [0-9]+ tokens \(rows 1040\.\.'

# Quiet: no progress lines.
expect 0 "quiet" "$QVL" encode -q --model "$T/m" "$PNG" -o "$T/w.safetensors"
if [[ -s "$T/err" ]]; then bad "quiet still wrote to stderr"; else ok; fi

# -o one of the inputs, inside a frame-directory input, or the model's weights: a usage error before any work.
cp "$PNG" "$T/in.png" && cp "$T/in.png" "$T/in.keep" && cp "$T/m/model.safetensors" "$T/m.keep"
expect 2 "-o the input image" "$QVL" encode --model "$T/m" "$T/in.png" -o "$T/in.png"
has "-o the input image named" "$T/err" "error: -o $T/in.png is the input $T/in.png"
# A frame directory named with a trailing slash: its files are DIR/NAME in messages (they were DIR//NAME).
expect 1 "mismatched frames" "$QVL" encode --model "$T/m" "$SRC/tests/data/video/frames/" -o "$T/mm.safetensors"
has "frame path" "$T/out" 'tests/data/video/frames/video_frame_12x16\.png: frame [0-9]+ is 12x16'
if grep -q 'frames//' "$T/out"; then bad "a doubled slash in a frame's path"; else ok; fi
expect 2 "-o in the frame directory" "$QVL" encode --model "$T/m" "$FRAMES" -o "$FRAMES/out.safetensors"
has "-o in the frame directory named" "$T/err" "inside the frame directory input $FRAMES"
[[ -e $FRAMES/out.safetensors ]] && bad "wrote into the frame directory" || ok
expect 2 "-o the model's weights" "$QVL" encode --model "$T/m" "$T/in.png" -o "$T/m/model.safetensors"
has "-o the model's weights named" "$T/err" "a file of the model"
mkfifo "$T/o.fifo"
expect 2 "-o a FIFO" timeout 10 "$QVL" encode --preprocess-only "$T/in.png" -o "$T/o.fifo"
cmp -s "$T/in.png" "$T/in.keep" && cmp -s "$T/m/model.safetensors" "$T/m.keep" && [[ -p $T/o.fifo ]] && ok ||
    bad "an input, the model or the FIFO changed"
# A FIFO as an image or video input fails that input at once instead of blocking.
mkfifo "$T/in.fifo.png" "$T/in.fifo.mp4"
expect 1 "FIFO inputs" timeout 10 "$QVL" encode --model "$T/m" "$T/in.fifo.png" "$T/in.fifo.mp4" -o "$T/ff.safetensors"
has "FIFO image named" "$T/err" "in.fifo.png: not a regular file \(it is a FIFO\)"
has "FIFO video named" "$T/err" "in.fifo.mp4: not a regular file \(it is a FIFO\)"

# Inputs that are no image or accepted video, whatever their names: a playlist and a concat script naming a real
# video, text named .png, an empty .jpg, a truncated MP4. Each fails with qvl's own message (FFmpeg's detail inside
# it), and FFmpeg writes nothing to stderr: with -q stderr stays empty, without it only progress lines appear.
cp "$VIDEO" "$T/seg.mp4"
printf '#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nseg.mp4\n#EXT-X-ENDLIST\n' >"$T/list.m3u8"
printf 'ffconcat version 1.0\nfile seg.mp4\n' >"$T/cat.ffconcat"
printf 'not an image\n' >"$T/text.png"
: >"$T/empty.jpg"
HOSTILE=("$T/list.m3u8" "$T/cat.ffconcat" "$T/text.png" "$T/empty.jpg" "$SRC/tests/data/bad/video_truncated.mp4")
expect 1 "refused inputs" "$QVL" encode -q --model "$T/m" "${HOSTILE[@]}" -o "$T/h.safetensors"
if [[ -s "$T/err" ]]; then bad "refused inputs wrote to stderr: $(head -c 300 "$T/err")"; else ok; fi
expect 1 "refused inputs, progress" "$QVL" encode --model "$T/m" "${HOSTILE[@]}" -o "$T/h.safetensors"
has "playlist refused" "$T/out" "list.m3u8: FAILED: .*FFmpeg detects 'hls'"
has "concat refused" "$T/out" "cat.ffconcat: FAILED: .*FFmpeg detects 'concat'"
has "text named .png" "$T/out" 'text.png: FAILED: .*text.png: not a recognised image or video format \(13 bytes, starting "not an image\\n"'
has "empty .jpg" "$T/out" 'empty.jpg: FAILED: .*empty.jpg: empty \(0 bytes\), not a recognised image or video format'
has "FFmpeg's detail in the message" "$T/out" 'video_truncated.mp4: FAILED: .*\(FFmpeg: .*moov atom not found\)'
if grep -v '^\[[0-9]*/[0-9]*\] ' "$T/err" | grep -q .; then bad "stderr has more than progress: $(head -c 300 "$T/err")"
else ok; fi

# --cache with a tower without DeepStack: one plane, stored [tokens, O] as the server stores it, and read back as a
# hit (the CLI once wrote and read only [planes, tokens, O], and so missed the server's entries and overwrote them).
if "$QVL" --help 2>&1 | grep -q '^  cache '; then # built with the server (and so the cache)
    "$QVL" synth --preset tiny-3.5 --seed 1 -o "$T/m35" >/dev/null || bad "synth tiny-3.5"
    expect 0 "--cache store (one plane)" "$QVL" encode --model "$T/m35" --cache "$T/c35" "$PHOTO" -o "$T/c1.safetensors"
    expect 0 "--cache hit (one plane)" "$QVL" encode --model "$T/m35" --cache "$T/c35" "$PHOTO" -o "$T/c2.safetensors"
    head -c 65536 "$T/c2.safetensors" | tr ',' '\n' >"$T/c2meta"
    has "one-plane entry is a hit" "$T/c2meta" '"item0.cache":"hit"'
    ent=$(find "$T/c35/objects" -name '*.safetensors' | head -n 1)
    head -c 4096 "$ent" | tr '}' '\n' >"$T/c35hdr"
    has "one-plane entry is 2-D" "$T/c35hdr" '"ec_cache":\{"dtype":"F32","shape":\[[0-9]+,[0-9]+\]'
    if cmp -s <(tail -c 4096 "$T/c1.safetensors") <(tail -c 4096 "$T/c2.safetensors"); then ok; else bad "hit differs"; fi

    # A file replaced between the reads of it (the shim: its second and later opens open another image): the key
    # and the encode come from the same bytes, read once, so what is stored under the photo's key is the photo's
    # encode (the CLI hashed the file, then decoded it again: the other image's tokens under the photo's key).
    if [[ -n ${QVL_SWAP_SHIM:-} && $QVL_CROSS != 1 ]]; then
        swapped() { # swapped FROM TO CMD...: CMD with FROM opening TO from its second open on
            env LD_PRELOAD="$QVL_SWAP_SHIM" QVL_TEST_SWAP_FROM="$1" QVL_TEST_SWAP_TO="$2" \
                ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" "${@:3}"
        }
        OTHER=$SRC/tests/data/images/jpeg_420.jpg
        cp "$PHOTO" "$T/swap.jpg"
        expect 0 "swapped file encoded" swapped "$T/swap.jpg" "$OTHER" \
            "$QVL" encode --model "$T/m35" --cache "$T/cswap" "$T/swap.jpg" -o "$T/s1.safetensors"
        expect 0 "photo, no cache" "$QVL" encode --model "$T/m35" "$PHOTO" -o "$T/s2.safetensors"
        expect 0 "photo from the cache" "$QVL" encode --model "$T/m35" --cache "$T/cswap" "$PHOTO" -o "$T/s3.safetensors"
        head -c 65536 "$T/s3.safetensors" | tr ',' '\n' >"$T/s3meta"
        has "photo is a hit" "$T/s3meta" '"item0.cache":"hit"'
        if cmp -s <(tail -c 65536 "$T/s2.safetensors") <(tail -c 65536 "$T/s3.safetensors"); then ok
        else bad "the entry under the photo's key is not the photo's encode"; fi
        k1=$(head -c 65536 "$T/s1.safetensors" | grep -ao '"item0.key":"[0-9a-f]*"')
        k2=$(head -c 65536 "$T/s2.safetensors" | grep -ao '"item0.key":"[0-9a-f]*"')
        if [[ -n $k1 && $k1 == "$k2" ]]; then ok; else bad "swapped file's key '$k1', the photo's '$k2'"; fi
        # A directory of frames is read by the library by name: a frame that changes between the key and the encode
        # makes the key differ after it, and the result is neither stored nor keyed (it was stored under the key
        # of frames the encode never saw).
        cp -r "$FRAMES" "$T/fswap"
        expect 0 "frame swapped" swapped "$T/fswap/video_frame_2.png" "$FRAMES/video_frame_4.png" \
            "$QVL" encode --model "$T/m35" --cache "$T/cframes" "$T/fswap" -o "$T/f1.safetensors"
        has "frame swapped: warned" "$T/err" "fswap changed while it was encoded: not stored in the cache"
        n=$(find "$T/cframes/objects" -name '*.safetensors' 2>/dev/null | wc -l)
        if [[ $n -eq 0 ]]; then ok; else bad "frame swapped: $n cache entries, want 0"; fi
        if head -c 65536 "$T/f1.safetensors" | grep -aq '"item0.key"'; then bad "frame swapped: a key written"; else ok; fi
        expect 0 "frames unchanged" "$QVL" encode --model "$T/m35" --cache "$T/cframes" "$T/fswap" -o "$T/f2.safetensors"
        n=$(find "$T/cframes/objects" -name '*.safetensors' | wc -l)
        if [[ $n -eq 1 ]]; then ok; else bad "frames unchanged: $n cache entries, want 1"; fi
        if head -c 65536 "$T/f2.safetensors" | grep -aq '"item0.key"'; then ok; else bad "frames unchanged: no key"; fi
    fi
fi

echo "cli_media: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
