"""`macaron router [serve|train|refit-turns|eval]`: the L0 router's gRPC server and its classifier tools.

Plain `macaron router` serves, as the Helm chart runs it. `train` builds the specialist
classifier's artifact; `refit-turns` refits only its conversation decision on new multi-turn data, from
the inputs `train --save-turn-inputs` kept (turn_refit.py); `eval` prints its metrics on a JSONL file as
one JSON object.
Heavy imports stay inside the handlers so `macaron --help` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from macaron.router.serve_cli import add_serve_arguments


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("router", help="Serve the L0 router (default) or train/evaluate its classifier.")
    add_serve_arguments(parser)
    sub = parser.add_subparsers(dest="router_command", metavar="SUBCOMMAND")
    add_serve_arguments(sub.add_parser("serve", help="Serve the L0 router over gRPC (the default)."))
    add_train_parser(sub)
    add_refit_turns_parser(sub)
    add_eval_parser(sub)


def add_train_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "train",
        help="Build the specialist classifier's artifact from the routing data (reproducible, fixed seed).",
    )
    p.add_argument("--data-dir", help="Folder with train.jsonl and dev.jsonl (default: the copy shipped with the package, "
                   "or $MACARON_ROUTING_DATA).")
    p.add_argument("--out", help="Artifact to write (default: the one shipped inside the package).")
    p.add_argument("--seed", type=int, default=0, help="Random seed (default: 0).")
    p.add_argument("--no-escalation", action="store_true", help="Train the fast model only (no embedding model).")
    p.add_argument("--no-holdout", action="store_true",
                   help="Skip the per-repository hold-out (no calibration, no measured threshold).")
    p.add_argument("--no-finetune", action="store_true",
                   help="Keep the frozen MiniLM (no LoRA fine-tune of the escalation encoder; saves about 15 min "
                   "on one thread).")
    p.add_argument("--no-second-encoder", action="store_true",
                   help="No second escalation encoder (the base model cut to 16 blocks, tuned for routing; saves "
                   "about 58 of the 84 minutes a train took on 2 cores).")
    p.add_argument("--static-dims", type=int, default=None,
                   help="Static features of the fast path: MiniLM distilled (model2vec) into token vectors of this many "
                   "dimensions; 0 turns them off (default: the training config's).")
    _add_followup_encoder(p, "the training config's, both")
    p.add_argument("--full-share-lines", type=int, default=None,
                   help="A repository with fewer lines of a class than this gets its share of the class in proportion; "
                   "0 gives every repository a full share (default: the training config's).")
    p.add_argument("--report", help="Also write the training report (hold-out and dev metrics) as JSON here.")
    p.add_argument("--save-turn-inputs", metavar="FILE",
                   help="Also keep the conversation step's inputs here, so `macaron router refit-turns` can refit the "
                   "conversation decision alone on new multi-turn data (minutes instead of a full train).")
    p.set_defaults(func=_train)


def _add_followup_encoder(p: argparse.ArgumentParser, default: str) -> None:
    from macaron.router.classifier.followup import ENCODERS

    p.add_argument("--followup-encoder", choices=ENCODERS, default=None,
                   help="The encoder whose embedding the follow-up model reads where the escalation encoder is tuned: "
                   "the tuned one, MiniLM frozen, or both side by side (frozen and both: a second encoder in the "
                   f"router; classifier README, \"Z2\") (default: {default}).")


def add_refit_turns_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "refit-turns",
        help="Refit only the conversation decision and follow-up models on the current multi-turn data, from the "
        "inputs `macaron router train --save-turn-inputs` kept (the rest of the artifact is unchanged).",
    )
    p.add_argument("--inputs", required=True, metavar="FILE", help="What `macaron router train --save-turn-inputs` kept.")
    p.add_argument("--artifact", help="The artifact that train wrote (default: the one shipped inside the package).")
    p.add_argument("--data-dir", help="Folder with train.jsonl, multiturn_train.jsonl and multiturn_dev.jsonl "
                   "(default: the shipped copy, or $MACARON_ROUTING_DATA).")
    p.add_argument("--out", help="Artifact to write (default: the one given as --artifact, replaced).")
    p.add_argument("--report", help="Also write the updated training report as JSON here.")
    _add_followup_encoder(p, "the one the saved inputs were trained with")
    p.set_defaults(func=_refit_turns)


def add_eval_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "eval",
        help="Evaluate the classifier on a JSONL file of {text|messages, label}; prints one JSON object.",
    )
    p.add_argument("--data", required=True, help="JSONL file, one {\"text\" or \"messages\", \"label\"} per line.")
    p.add_argument("--artifact", help="Artifact to evaluate (default: the configured or shipped one).")
    p.add_argument("--no-escalation", action="store_true", help="Fast path only.")
    p.add_argument("--threshold", type=float, help="Escalation threshold (default: the artifact's).")
    p.set_defaults(func=_eval)


def _settings(args: argparse.Namespace):
    from macaron.config import load_settings

    return load_settings(getattr(args, "config", None)).classifier


def _train(args: argparse.Namespace) -> int:
    from macaron.router.classifier.errors import ClassifierError
    from macaron.router.classifier.model import SHIPPED_ARTIFACT
    from macaron.router.classifier.train import TrainConfig, train
    from macaron.router.classifier.evaluate import evaluate
    from macaron.router.classifier.decision import SpecialistClassifier
    from macaron.router.classifier.data import find_data_dir, load_jsonl

    config = TrainConfig(seed=args.seed, escalation=not args.no_escalation, holdout=not args.no_holdout,
                         finetune=not args.no_finetune, second_encoder=not args.no_second_encoder)
    if args.full_share_lines is not None:
        if args.full_share_lines < 0:
            print("error: --full-share-lines must be 0 (every repository a full share) or more", file=sys.stderr)
            return 2
        config = dataclasses.replace(config, full_share_lines=args.full_share_lines)
    if args.followup_encoder is not None:
        config = dataclasses.replace(config, followup_embedding_encoder=args.followup_encoder)
    if args.static_dims is not None:
        if args.static_dims < 0:
            print("error: --static-dims must be 0 (off) or a positive number of dimensions", file=sys.stderr)
            return 2
        config = dataclasses.replace(config, static_dims=args.static_dims)
    try:
        artifact = train(args.data_dir, config, progress=lambda m: print(m, file=sys.stderr, flush=True),
                         save_turn_inputs=args.save_turn_inputs)
        dev = load_jsonl(find_data_dir(args.data_dir) / "dev.jsonl")
    except ClassifierError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("evaluating on dev.jsonl", file=sys.stderr, flush=True)
    classifier = SpecialistClassifier(artifact, _settings(args))
    artifact.report["dev"] = evaluate(classifier, dev)
    _evaluate_multiturn_dev(classifier, args.data_dir)
    out = artifact.save(args.out or SHIPPED_ARTIFACT)
    _write_report(artifact, out, args.report)
    return 0


def _evaluate_multiturn_dev(classifier, data_dir: str | None) -> None:
    """The conversation decision on multiturn_dev.jsonl, into the artifact's report (as every train does)."""
    from macaron.router.classifier.data import find_data_dir, load_jsonl
    from macaron.router.classifier.evaluate import evaluate

    multiturn_dev = find_data_dir(data_dir) / "multiturn_dev.jsonl"
    if classifier.artifact.turn is not None and multiturn_dev.is_file():
        print("evaluating on multiturn_dev.jsonl", file=sys.stderr, flush=True)
        report = evaluate(classifier, load_jsonl(multiturn_dev))
        classifier.artifact.report["multiturn_dev"] = {
            k: report[k] for k in ("n", "accuracy", "multiturn", "multiturn_fast", "escalation_rate")}


def _write_report(artifact, out: Path, extra: str | None) -> None:
    """The report travels beside the artifact (hold-out per repository, curves, dev metrics); the headline is printed."""
    for path in filter(None, (out.with_suffix(".report.json"), extra)):
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(artifact.report, handle, indent=2, sort_keys=True)
            handle.write("\n")
    print(json.dumps({"artifact": str(out), **_headline(artifact.report)}))


def _refit_turns(args: argparse.Namespace) -> int:
    from macaron.router.classifier.data import find_data_dir, load_jsonl
    from macaron.router.classifier.decision import SpecialistClassifier
    from macaron.router.classifier.errors import ClassifierError
    from macaron.router.classifier.model import SHIPPED_ARTIFACT, Artifact, file_sha256
    from macaron.router.classifier.turn_refit import TurnStepInputs, refit, save_beside

    source = Path(args.artifact) if args.artifact else SHIPPED_ARTIFACT
    try:
        folder = find_data_dir(args.data_dir)
        multiturn_file = folder / "multiturn_train.jsonl"
        artifact = refit(TurnStepInputs.load(args.inputs), Artifact.load(source), load_jsonl(multiturn_file),
                         train_sha256=file_sha256(folder / "train.jsonl"), followup_encoder=args.followup_encoder,
                         progress=lambda m: print(m, file=sys.stderr, flush=True))
    except ClassifierError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    artifact.report.setdefault("data", {})["multiturn_train_sha256"] = file_sha256(multiturn_file)
    _evaluate_multiturn_dev(SpecialistClassifier(artifact, _settings(args)), args.data_dir)
    out = save_beside(artifact, source, args.out or source)
    _write_report(artifact, out, args.report)
    return 0


def _headline(report: dict) -> dict:
    holdout = report.get("holdout", {})
    dev = report.get("dev", {})
    return {
        "dev_accuracy": dev.get("accuracy"),
        "dev_macro_f1": dev.get("macro_f1"),
        "dev_escalation_rate": dev.get("escalation_rate"),
        "source_holdout_accuracy": holdout.get("mean_accuracy"),
        "source_holdout_fast_accuracy": holdout.get("mean_fast_accuracy"),
        "source_holdout_macro_f1": holdout.get("pooled", {}).get("macro_f1"),
        "source_holdout_escalation_rate": holdout.get("escalation_rate"),
        "source_holdout_second_encoder_rate": holdout.get("second_rate"),
        "escalation_threshold": holdout.get("threshold"),
        "per_repository": {k: v.get("accuracy") for k, v in holdout.get("per_repository", {}).items()},
        "multiturn_holdout": report.get("multiturn_holdout", {}).get("pooled"),
        "multiturn_dev": report.get("multiturn_dev", {}).get("multiturn"),
    }


def _eval(args: argparse.Namespace) -> int:
    from macaron.router.classifier.data import load_jsonl
    from macaron.router.classifier.decision import SpecialistClassifier
    from macaron.router.classifier.errors import ClassifierError
    from macaron.router.classifier.evaluate import evaluate

    settings = _settings(args)
    updates = {}
    if args.artifact:
        updates["artifact_path"] = args.artifact
    if args.no_escalation:
        updates["escalation"] = False
    if args.threshold is not None:
        updates["escalation_threshold"] = args.threshold
    settings = settings.model_copy(update=updates)
    try:
        classifier = SpecialistClassifier.load(settings)
        examples = load_jsonl(args.data)
    except ClassifierError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(evaluate(classifier, examples)))
    return 0
