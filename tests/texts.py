"""Small English texts the tests write: GPT's training corpus (a KJV-like vocabulary, seeded)."""

import random

NOUNS = ["king", "people", "city", "house", "land", "servant", "son", "lord", "water", "bread"]
VERBS = ["saw", "built", "gave", "found", "kept", "took", "blessed", "sent"]


def write_documents(path, documents=20, lines=6, seed=0):
    """Writes ``documents`` paragraphs of ``lines`` sentences ("and the king saw the city of the land.") separated
    by blank lines to ``path`` (a pathlib.Path); returns ``path``."""
    rng = random.Random(seed)
    paragraphs = ["\n".join(f"and the {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(NOUNS)} of the "
                            f"{rng.choice(NOUNS)}." for _ in range(lines)) for _ in range(documents)]
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return path
