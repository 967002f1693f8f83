"""The BERT benchmarks' results as Markdown tables (benchmarks/bert_pretraining.py and bert_finetune.py
``--table``): a row per results.json of :func:`~attnlayers.applications.bert.pretraining.run_pretraining` or
:func:`~attnlayers.applications.bert.finetuning.run_finetuning`.

    print_table([json.load(open(path)) for path in paths])
"""

from __future__ import annotations


def result_row(result):
    """One benchmark result as a table row: task, init, seed, budget (minutes, or epochs without a time budget),
    steps, metric, baseline."""
    minutes, epochs = result.get("minutes"), result.get("epochs")
    budget = f"{minutes:g} min" if minutes is not None else f"{epochs} epochs" if epochs else "-"
    task = result["task"]
    objective = result.get("sentence_objective", "nsp")  # results written before the option were NSP's
    if task == "pretraining":
        sentence = (f"{objective.upper()} weight {result.get('nsp_weight', 1.0):g}" if objective
                    else "MLM only")
        task = (f"pretraining ({result.get('corpus', 'kjv')}, {result.get('config')}, lr "
                f"{result.get('learning_rate', 0):g}, {sentence})")
    init = f"{result['init']} ({result['checkpoint']})" if result.get("checkpoint") else result["init"]
    common = [task, init, str(result["seed"]), budget, str(result["training"]["steps"])]
    if result["task"] == "pretraining":
        held, base = result["held_out"], result["baselines"]
        if objective is None:
            return common + [f"MLM {held['mlm_accuracy']:.3f}",
                             f"MLM {base['mlm_most_frequent_token']:.3f} (most frequent token)"]
        name = objective.upper()
        return common + [f"MLM {held['mlm_accuracy']:.3f} / {name} {held[f'{objective}_accuracy']:.3f}",
                         f"MLM {base['mlm_most_frequent_token']:.3f} (most frequent token) / {name} 0.5"]
    test, base, metric = result["test"], result["baseline"], result["metric"]
    name = "macro-F1" if metric == "macro_f1" else "accuracy"
    extra = f" (accuracy {test['accuracy']:.3f})" if metric != "accuracy" else ""
    return common + [f"{name} {test[metric]:.3f}{extra}", f"{base[metric]:.3f} ({base['name']})"]


def print_table(results):
    """Prints the rows of :func:`result_row` as a Markdown table."""
    print("| task | init | seed | budget | steps | metric | baseline |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
        print("| " + " | ".join(result_row(result)) + " |")


__all__ = ["print_table", "result_row"]
