# `mha` with weights and attention from elsewhere, end to end: --weights holding a bigger model's
# state_dict (refused with every prefix listed, --prefix picking one, a bad prefix refused), and
# `export --attention` drawing a saved attention tensor exactly as the forward's own figure, with
# each refusal exiting 2 with a message naming the size, and warnings for non-softmax values.
file(REMOVE_RECURSE ${OUT})
set(ENCODER ${SRC}/tests/fixtures/encoder_state_dict)
set(GPT2 ${SRC}/tests/fixtures/gpt2/f32)

include(${CMAKE_CURRENT_LIST_DIR}/cli_expect.cmake)

function(expect_same_file a b)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${a} ${b} RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "${a} and ${b} differ")
  endif()
endfunction()

# --- --weights: a two-layer nn.TransformerEncoder's state_dict holds two nn.MultiheadAttention.
set(ENC_ARGS --inputs ${ENCODER} --num-heads 2 --weights ${ENCODER}/model.safetensors)
expect_refused("two modules without --prefix"
               "2 nn.MultiheadAttention modules, under the prefixes 'layers\\.0\\.self_attn\\.' \\(4 tensors\\), 'layers\\.1\\.self_attn\\.' \\(4 tensors\\); --prefix P picks one"
               compute ${ENC_ARGS})
expect_ok("compute --prefix layers.1.self_attn." compute ${ENC_ARGS} --prefix layers.1.self_attn. --out ${OUT}/enc)
if(NOT OUT_TEXT MATCHES "warning: [^\n]*under the prefix 'layers\\.1\\.self_attn\\.' \\(4 tensors\\); 20 other tensors ignored")
  message(FATAL_ERROR "compute --prefix does not say which prefix it used:\n${OUT_TEXT}")
endif()
if(NOT EXISTS ${OUT}/enc/output.npy)
  message(FATAL_ERROR "compute --prefix did not write output.npy")
endif()
expect_ok("export --prefix" export ${ENC_ARGS} --prefix layers.0.self_attn --head all --out ${OUT}/enc.png)
expect_refused("a prefix that matches none"
               "no nn.MultiheadAttention under --prefix 'layers\\.2\\.self_attn\\.'; prefixes found: 'layers\\.0\\.self_attn\\.'"
               compute ${ENC_ARGS} --prefix layers.2.self_attn.)

# --- export --attention: the forward's attn_weights.npy, drawn again from the file, gives the same
# bytes as the forward's own figure (every head and the average, token labels, PNG and CSV).
set(SEED_ARGS --torch-seed 42 --batch 3 --tgt-len 4 --embed-dim 8 --num-heads 2 --no-bias)
expect_ok("compute --torch-seed" compute ${SEED_ARGS} --out ${OUT}/seed)
foreach(ext png csv)
  if(ext STREQUAL "png")
    set(head all)
  else()
    set(head 1)
  endif()
  expect_ok("export the forward" export ${SEED_ARGS} --batch-index 2 --head ${head} --tokens "the cat sat down"
            --out ${OUT}/forward.${ext})
  expect_ok("export --attention" export --attention ${OUT}/seed/attn_weights.npy --batch-index 2 --head ${head}
            --tokens "the cat sat down" --out ${OUT}/file.${ext})
  if(OUT_TEXT MATCHES "warning")
    message(FATAL_ERROR "a softmax's weights were warned about:\n${OUT_TEXT}")
  endif()
  expect_same_file(${OUT}/forward.${ext} ${OUT}/file.${ext})
endforeach()
# A folder: every head, the average, the grid and index.json, as for a forward.
expect_ok("export --attention to a folder" export --attention ${GPT2}/expected/attn_weights.npy --out ${OUT}/heads/)
foreach(f attn_weights_b0_head3.png attn_weights_b0_avg.png attn_weights_b0_all.png index.json)
  if(NOT EXISTS ${OUT}/heads/${f})
    message(FATAL_ERROR "export --attention DIR/ did not write ${f}")
  endif()
endforeach()

# Refusals, each naming the size or the rule.
set(W ${GPT2}/expected/attn_weights.npy)  # (3, 4, 15, 15): read as (N, H, T, T)
expect_refused("--batch-index out of range" "--batch-index 3 is out of range: attn_weights has 3 batch items \\(0\\.\\.2\\)"
               export --attention ${W} --batch-index 3 --out ${OUT}/x.png)
expect_refused("--head out of range" "--head 4 is out of range: attn_weights has 4 heads"
               export --attention ${W} --head 4 --out ${OUT}/x.png)
expect_refused("--layer without a layer axis" "--layer: .*attn_weights.npy has no layer axis \\(shape \\(3, 4, 15, 15\\)\\)"
               export --attention ${W} --layer 1 --out ${OUT}/x.png)
expect_refused("--tokens count" "--tokens has 3 tokens but the query length L has 15"
               export --attention ${W} --tokens "a b c" --out ${OUT}/x.png)
expect_refused("non-square" "context.npy: shape \\(3, 4, 15, 8\\) ends in 15 × 8; expected square"
               export --attention ${GPT2}/expected/context.npy --out ${OUT}/x.png)
expect_refused("integer dtype" "input_ids.npy: dtype int64; attention weights are float"
               export --attention ${GPT2}/expected/input_ids.npy --out ${OUT}/x.png)
expect_refused("rank 1" "logits.npy: shape \\(270,\\); expected \\(T, T\\), \\(H, T, T\\), \\(N, H, T, T\\) or \\(layers, N, H, T, T\\)"
               export --attention ${GPT2}/expected/logits.npy --out ${OUT}/x.png)
expect_refused("--attention with --torch-seed" "--attention brings the weights already computed"
               export --attention ${W} ${SEED_ARGS} --out ${OUT}/x.png)
expect_refused("--attention with --figure reshape" "--attention holds the weights alone"
               export --attention ${W} --figure reshape --out ${OUT}/x.png)

# Scores are not a softmax: drawn, with warnings naming the first value and the first row.
expect_ok("export --attention scores" export --attention ${OUT}/seed/trace/scores.npy --out ${OUT}/scores.png)
if(NOT OUT_TEXT MATCHES "warning: [^\n]*scores.npy: [0-9]+ values? outside \\[0, 1\\]; the first, [^\n]*, at batch 0, head 0, row 0"
   OR NOT OUT_TEXT MATCHES "warning: [^\n]*scores.npy: [0-9]+ rows? not summing to 1; the first at batch 0, head 0, row 0 sums to")
  message(FATAL_ERROR "export --attention of scores did not warn:\n${OUT_TEXT}")
endif()
