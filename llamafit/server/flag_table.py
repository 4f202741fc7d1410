"""Every flag llama-server accepts at llama.cpp 0c1e570, by how many values follow it.

Taken from common/arg.cpp `common_params_parser_init(params, LLAMA_EXAMPLE_SERVER)`: the
`add_opt(common_arg(...))` entries tagged LLAMA_EXAMPLE_COMMON or LLAMA_EXAMPLE_SERVER and not
`set_excludes`-d for the server, positive and negative (`args_neg`) spellings, in arg.cpp order.
The same set as the tables of tools/server/README.md. Data only: no logic lives here.
"""

from __future__ import annotations

# switches: handler_void or handler_bool (a negative spelling passes false)
NO_VALUE: frozenset[str] = frozenset(
    """
    -h --help --usage --version -cl --cache-list --completion-bash --swa-full -kvu --kv-unified
    -no-kvu --no-kv-unified --cache-idle-slots --no-cache-idle-slots --context-shift
    --no-context-shift --perf --no-perf -e --escape --no-escape -sp --special --warmup
    --no-warmup --spm-infill --ignore-eos -bs --backend-sampling -kvo --kv-offload -nkvo
    --no-kv-offload --repack -nr --no-repack --no-host -cb --cont-batching -nocb
    --no-cont-batching --mmproj-auto --no-mmproj --no-mmproj-auto --mmproj-offload
    --no-mmproj-offload --list-devices -cmoe --cpu-moe --check-tensors --op-offload
    --no-op-offload --reuse-port --cors-credentials --no-cors-credentials --ui-mcp-proxy
    --webui-mcp-proxy --no-ui-mcp-proxy --no-webui-mcp-proxy -ag --agent -no-ag --no-agent --ui
    --webui --no-ui --no-webui --embedding --embeddings --rerank --reranking --cache-prompt
    --no-cache-prompt --metrics --props --slots --no-slots --models-autoload
    --no-models-autoload --jinja --no-jinja --reasoning-preserve --no-reasoning-preserve
    --skip-chat-parsing --no-skip-chat-parsing --prefill-assistant --no-prefill-assistant
    --lora-init-without-apply --log-disable --log-jsonl --no-log-jsonl -v --verbose
    --log-verbose --offline --log-prefix --no-log-prefix --log-timestamps --no-log-timestamps
    --spec-draft-cpu-moe -cmoed --cpu-moe-draft --spec-draft-backend-sampling
    --no-spec-draft-backend-sampling --embd-gemma-default --fim-qwen-1.5b-default
    --fim-qwen-3b-default --fim-qwen-7b-default --fim-qwen-7b-spec --fim-qwen-14b-spec
    --fim-qwen-30b-default --gpt-oss-20b-default --gpt-oss-120b-default
    --vision-gemma-4b-default --vision-gemma-12b-default --spec-default
    """.split()
)

# handler_string / handler_int: the next argv entry is the value, whatever it starts with
ONE_VALUE: frozenset[str] = frozenset(
    """
    -t --threads -tb --threads-batch -C --cpu-mask -Cr --cpu-range --cpu-strict --prio --poll
    -Cb --cpu-mask-batch -Crb --cpu-range-batch --cpu-strict-batch --prio-batch --poll-batch
    -lcs --lookup-cache-static -lcd --lookup-cache-dynamic -c --ctx-size --kv-unified-per-slot
    -n --predict --n-predict -b --batch-size -ub --ubatch-size --keep -ctxcp --ctx-checkpoints
    --swa-checkpoints -cms --checkpoint-min-step -cram --cache-ram -fa --flash-attn -r
    --reverse-prompt --samplers -s --seed --sampler-seq --sampling-seq --temp --temperature
    --top-k --top-p --min-p --top-nsigma --top-n-sigma --xtc-probability --xtc-threshold
    --typical --typical-p --repeat-last-n --repeat-penalty --presence-penalty
    --frequency-penalty --dry-multiplier --dry-base --dry-allowed-length --dry-penalty-last-n
    --dry-sequence-breaker --adaptive-target --adaptive-decay --dynatemp-range --dynatemp-exp
    --mirostat --mirostat-lr --mirostat-ent -l --logit-bias --grammar --grammar-file -j
    --json-schema -jf --json-schema-file --pooling --rope-scaling --rope-scale --rope-freq-base
    --rope-freq-scale --yarn-orig-ctx --yarn-ext-factor --yarn-attn-factor --yarn-beta-slow
    --yarn-beta-fast -ctk --cache-type-k -ctv --cache-type-v -dt --defrag-thold -np --parallel
    -mm --mmproj -mmu --mmproj-url -mmdev --mmproj-device --image-min-tokens --image-max-tokens
    --mtmd-batch-max-tokens --video-fps --video-timestamp-interval --video-ffmpeg-dir --rpc -lm
    --load-mode -lzm --lazy-mode --numa -dev --device -ot --override-tensor -ncmoe --n-cpu-moe
    -ncffn --n-cpu-ffn -ngl --gpu-layers --n-gpu-layers -sm --split-mode -ts --tensor-split -mg
    --main-gpu -fit --fit -fitt --fit-target -fitc --fit-ctx --override-kv --lora --lora-scaled
    --control-vector --control-vector-scaled -a --alias --tags -m --model -mu --model-url -dr
    --docker-repo -hf -hfr --hf-repo -hff --hf-file -hft --hf-token --embd-normalize --host
    --port --path --cors-origins --cors-methods --cors-headers --api-prefix --ui-config
    --webui-config --ui-config-file --webui-config-file --tools --tools-runtime
    --mcp-servers-config --mcp-servers-json --api-key --api-key-file --ssl-key-file
    --ssl-cert-file --chat-template-kwargs -to --timeout --sse-ping-interval --threads-http
    --cache-reuse --slot-save-path --media-path --models-dir --models-preset --models-max
    --reasoning-format -rea --reasoning --reasoning-effort --reasoning-budget
    --reasoning-budget-message --chat-template --chat-template-file -sps
    --slot-prompt-similarity --sleep-idle-seconds --log-file --log-prompts-dir --log-colors -lv
    --verbosity --log-verbosity --spec-draft-hf -hfd -hfrd --hf-repo-draft --spec-draft-threads
    -td --threads-draft --spec-draft-threads-batch -tbd --threads-batch-draft
    --spec-draft-cpu-mask -Cd --cpu-mask-draft --spec-draft-cpu-range -Crd --cpu-range-draft
    --spec-draft-cpu-strict --cpu-strict-draft --spec-draft-prio --prio-draft --spec-draft-poll
    --poll-draft --spec-draft-cpu-mask-batch -Cbd --cpu-mask-batch-draft
    --spec-draft-cpu-strict-batch --cpu-strict-batch-draft --spec-draft-prio-batch
    --prio-batch-draft --spec-draft-poll-batch --poll-batch-draft --spec-draft-type-k -ctkd
    --cache-type-k-draft --spec-draft-type-v -ctvd --cache-type-v-draft
    --spec-draft-override-tensor -otd --override-tensor-draft --spec-draft-n-cpu-moe
    --spec-draft-ncmoe -ncmoed --n-cpu-moe-draft --spec-draft-n-max --spec-draft-n-min
    --spec-synth-len --spec-synth-rates --spec-draft-p-split --draft-p-split --spec-draft-p-min
    --draft-p-min --spec-draft-device -devd --device-draft --spec-draft-ngl -ngld
    --gpu-layers-draft --n-gpu-layers-draft --spec-draft-model -md --model-draft --spec-type
    --spec-ngram-mod-n-min --spec-ngram-mod-n-max --spec-ngram-mod-n-match
    --spec-ngram-simple-size-n --spec-ngram-simple-size-m --spec-ngram-simple-min-hits
    --spec-ngram-map-k-size-n --spec-ngram-map-k-size-m --spec-ngram-map-k-min-hits
    --spec-ngram-map-k4v-size-n --spec-ngram-map-k4v-size-m --spec-ngram-map-k4v-min-hits
    --draft --draft-n --draft-max --draft-min --draft-n-min --spec-ngram-size-n
    --spec-ngram-size-m --spec-ngram-min-hits
    """.split()
)

# handler_str_str: the next two argv entries
TWO_VALUES: frozenset[str] = frozenset({"--control-vector-layer-range"})  # START END
