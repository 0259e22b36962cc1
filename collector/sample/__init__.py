"""The sample wing: seeded sample runs as the guard would record them (``generator``) and the
portable sample file, gzip JSONL of store rows (``file``), that ``budgetlens demo`` loads."""

from budgetlens.sample.file import (
    SAMPLE_FILE,
    SAMPLE_FORMAT,
    demo_end_utc,
    ensure_demo_store,
    export_sample_jsonl,
    load_sample_file,
    read_sample_file,
)
from budgetlens.sample.generator import (
    SAMPLE_END_UTC,
    SAMPLE_SEED,
    TASK_TYPES,
    default_end_utc,
    generate_sample,
    generation_id,
    write_sample,
)

__all__ = [
    "SAMPLE_END_UTC",
    "SAMPLE_FILE",
    "SAMPLE_FORMAT",
    "SAMPLE_SEED",
    "TASK_TYPES",
    "default_end_utc",
    "demo_end_utc",
    "ensure_demo_store",
    "export_sample_jsonl",
    "generate_sample",
    "generation_id",
    "load_sample_file",
    "read_sample_file",
    "write_sample",
]
