cli_args = dict(
    cfg_time_str='20261128_091652',
    config=None,
    config_dir='configs',
    custom_dataset_data_type=None,
    custom_dataset_infer_method=None,
    custom_dataset_meta_path=None,
    custom_dataset_path=None,
    datasets=[
        'gsm8k_gen_0_shot_cot_str',
    ],
    debug=False,
    dir_time_str='20261128_091652',
    dry_run=False,
    dump_eval_details=True,
    dump_extract_rate=False,
    max_num_workers=1,
    max_workers_per_gpu=1,
    merge_ds=False,
    mode='all',
    models=[
        'vllm_api_general',
    ],
    num_prompts=None,
    num_warmups=0,
    pressure=False,
    pressure_time=15,
    reuse=None,
    search=False,
    summarizer=None,
    work_dir='/tmp/h54p-xc/ais/vllm_api_general x gsm8k_gen_0_shot_cot_str')
datasets = [
    [
        dict(
            abbr='gsm8k',
            eval_cfg=dict(
                dataset_postprocessor=dict(
                    type=
                    'ais_bench.benchmark.datasets.gsm8k.gsm8k_dataset_postprocess'
                ),
                evaluator=dict(
                    type='ais_bench.benchmark.datasets.gsm8k.Gsm8kEvaluator'),
                pred_postprocessor=dict(
                    type='ais_bench.benchmark.datasets.gsm8k.gsm8k_postprocess'
                ),
                pred_role='BOT'),
            infer_cfg=dict(
                inferencer=dict(
                    batch_size=1,
                    mode='all',
                    model_cfg=dict(
                        abbr='vllm-api-general',
                        api_key='',
                        attr='service',
                        batch_size=1,
                        generation_kwargs=dict(
                            ignore_eos=False, temperature=0.01),
                        host_ip='localhost',
                        host_port=8080,
                        max_out_len=512,
                        model='',
                        path='',
                        request_rate=0,
                        retry=2,
                        stream=False,
                        trust_remote_code=False,
                        type=
                        'ais_bench.benchmark.models.api_models.vllm_custom_api.VLLMCustomAPI',
                        url='',
                        use_timestamp=False),
                    output_json_filepath=
                    '/tmp/h54p-xc/ais/vllm_api_general x gsm8k_gen_0_shot_cot_str/20261128_091652',
                    pressure_time=15,
                    type=
                    'ais_bench.benchmark.openicl.icl_inferencer.icl_gen_inferencer.GenInferencer'
                ),
                prompt_template=dict(
                    template=
                    "Question: {question}\nLet's think step by step\nAnswer:",
                    type=
                    'ais_bench.benchmark.openicl.icl_prompt_template.icl_prompt_template.PromptTemplate'
                ),
                retriever=dict(
                    prompt_template=dict(
                        template=
                        "Question: {question}\nLet's think step by step\nAnswer:",
                        type=
                        'ais_bench.benchmark.openicl.icl_prompt_template.icl_prompt_template.PromptTemplate'
                    ),
                    type=
                    'ais_bench.benchmark.openicl.icl_retriever.icl_zero_retriever.ZeroRetriever'
                )),
            path='ais_bench/datasets/gsm8k',
            reader_cfg=dict(
                input_columns=[
                    'question',
                ], output_column='answer'),
            type='ais_bench.benchmark.datasets.gsm8k.GSM8KDataset'),
    ],
]
eval = dict(runner=dict(task=dict(cal_extract_rate=False, dump_details=True)))
models = [
    dict(
        abbr='vllm-api-general',
        api_key='',
        attr='service',
        batch_size=1,
        generation_kwargs=dict(ignore_eos=False, temperature=0.01),
        host_ip='localhost',
        host_port=8080,
        max_out_len=512,
        model='',
        path='',
        request_rate=0,
        retry=2,
        stream=False,
        trust_remote_code=False,
        type=
        'ais_bench.benchmark.models.api_models.vllm_custom_api.VLLMCustomAPI',
        url='',
        use_timestamp=False),
]
work_dir = '/tmp/h54p-xc/ais/vllm_api_general x gsm8k_gen_0_shot_cot_str/20261128_091652'
