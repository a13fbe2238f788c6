"""FedAvg deltas (several local steps) no class-count or BN route took: client-fit, RLU where the outputs do not
depend on the input, else the mean of the count methods (the ensemble, also ``--strategy ensemble``)."""

from __future__ import annotations

from fedaudit.labels.auto_routes.calibration import CLIENT_FIT_MAX_PARAMETERS, INPUT_INDEPENDENT, RLU_MAX_RESIDUAL
from fedaudit.labels.auto_routes.common import batch_statistics, ensemble_of, negative_entries, parameters, ranked, routed, run_each
from fedaudit.labels.base import LabelResult
from fedaudit.session import Session
from fedaudit.threat_model import ThreatModel


def ensemble_members() -> tuple[str, ...]:
    """The methods whose count vectors the ensemble averages (each method's ``ensemble_rank``)."""
    return ranked(lambda m: m.ensemble_rank)


def by_client_fit(tm: ThreatModel, session: Session, spread: float | None) -> LabelResult | None:
    """A FedAvg delta (K > 1) of a model whose BatchNorm (if any) did not normalise with batch statistics, not
    routed by its class count: client-fit, which fits each step's class mix so that a client simulated on the aux
    images reproduces the whole update (docs/results/labels.md, "client-fit"), except on a model whose outputs do
    not depend on the input (softmax spread below INPUT_INDEPENDENT): RLU; on a model of more than
    CLIENT_FIT_MAX_PARAMETERS the earlier route (RLU if its residual is below RLU_MAX_RESIDUAL, else the ensemble);
    the ensemble where neither can run.
    The ensemble's members run too: their counts, and RLU's least-squares residual, are reported. None where
    neither applies."""
    runs, skipped = run_each(tm, session, ensemble_members())
    ensemble = ensemble_of(runs, skipped, spread)
    rlu = next((run for run in runs if run[0] == "rlu"), None)
    negative = negative_entries(tm)
    candidates = [{"method": n, "counts": r.counts_int.tolist(), "seconds": round(t, 3)} for n, r, _, t in runs]
    residual = float(rlu[1].diagnostics["residual"]) if rlu is not None else None
    extra = {"ensemble_counts": ensemble.counts_int.tolist() if ensemble is not None else None,
             "rlu_residual": residual, "candidates": candidates, "not_run": skipped}
    if rlu is not None and spread is not None and spread < INPUT_INDEPENDENT:
        return routed(rlu, "hybrid, RLU on a delta (input-independent outputs)", spread, negative, extra)
    if ensemble is not None and rlu is not None:
        ensemble.diagnostics["rlu_residual"] = residual
    size = parameters(tm)
    if size > CLIENT_FIT_MAX_PARAMETERS:  # the earlier route
        if rlu is not None and residual is not None and residual < RLU_MAX_RESIDUAL:
            return routed(rlu, "hybrid, RLU on a delta", spread, negative, extra)
        if ensemble is not None:
            ensemble.diagnostics["client_fit_skipped"] = f"{size} parameters > {CLIENT_FIT_MAX_PARAMETERS}"
            if rlu is not None:  # NaN counts as no fit
                ensemble.diagnostics["strategy"] = "ensemble (RLU does not fit)"
        return ensemble
    fitted, why = run_each(tm, session, ("client-fit",))
    if not fitted:
        if ensemble is not None:
            ensemble.diagnostics["not_run"] = {**ensemble.diagnostics["not_run"], **why}
        return ensemble
    name, result, _, seconds = fitted[0]
    extra["candidates"] = [*candidates, {"method": name, "counts": result.counts_int.tolist(),
                                         "seconds": round(seconds, 3), "fit": result.diagnostics["fit"]}]
    return routed(fitted[0], "hybrid, client-fit on a delta", spread, negative, extra)


def by_rlu_input_independent(tm: ThreatModel, session: Session, spread: float | None) -> LabelResult | None:
    """A FedAvg delta of a model that normalises with batch statistics and gives every input (nearly) the same
    softmax (a ResNet at random init), not routed by its class count: RLU, whose model of the output layer is
    then exact, as on models without such BatchNorm (``by_client_fit``). The BN-mixture reading is not tried
    before it there: at random init every layer's statistics depend on each batch's own normalisation, and
    on the random-init ResNet-10's random and Dirichlet clients bn-count read 63.4% and RLU 95.6 (docs/results/labels.md,
    "ResNet-10 and ResNet-18 FedAvg deltas"). None where RLU does not apply (the ensemble follows)."""
    runs, skipped = run_each(tm, session, ("rlu",))
    if not runs:
        return None
    return routed(runs[0], "hybrid, RLU on a delta (input-independent outputs)", spread,
                  negative_entries(tm), {"not_run": skipped})


def by_ensemble(tm: ThreatModel, session: Session, spread: float | None) -> LabelResult | None:
    """The mean of the applicable ensemble members'' integer count vectors, projected to integers summing to their
    total (common.ensemble_counts). Their errors differ in kind (bias-count, ZLG and LLG+ assume one softmax for the
    batch, iLRG one embedding per class, LLG the impact of each label, RLU a simulation of the local steps), so the
    mean trims each one's failures; bias-count, ZLG and LLG+ err alike and so weigh about three votes. Measured on
    LeNet FedAvg deltas (docs/results/labels.md) it is within a few points of the best method where one method leads
    and ahead of every single method where none does. On a delta of a model whose BatchNorm normalises with
    batch statistics RLU runs with ``--trajectory interpolate``: its simulated progress gains nothing there and
    costs several times as much (docs/results/labels.md, "RLU's path: simulated progress")."""
    options = {"rlu": {"trajectory": "interpolate"}} if tm.meta.local_steps > 1 and batch_statistics(tm) else {}
    runs, skipped = run_each(tm, session, ensemble_members(), options)
    result = ensemble_of(runs, skipped, spread)
    if result is not None and options:
        result.diagnostics["member_options"] = options
    return result
