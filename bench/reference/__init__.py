"""The reference pair: a small trained target/draft pair shipped with the package, and its task.

``arith`` (``bench.reference.arith``) generates the task's data; ``train`` reproduces the shipped
weights; the folders below hold them, loaded with ``from_pretrained``.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
TOKENIZER_DIR, TARGET_DIR, DRAFT_DIR = HERE / "tokenizer", HERE / "target", HERE / "draft"
