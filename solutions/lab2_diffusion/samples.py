"""Sample submissions for Lab 2 (diffusion): correct variants and one per catalogued bug.

``CELLS[name]`` maps a solution cell's grade_id to the full source a student might write; cells not listed
keep the reference solution. ``EXPECTED[name]`` is what the grader must conclude: full marks, or the
catalogued bug (``genlab.catalog.lab2_diffusion``) the function's tests must fail on and be named with.
Student folders are ``lab2_<name>`` (``reference`` is shared with the other labs). Format:
:mod:`autograder.release.sample_submissions`.
"""
from autograder.release.sample_submissions import bug_cell

CELLS = {
    "reference": {},

    # --- correct alternatives: must get full marks ------------------------------------------------
    "gather": {"q_sample": '''
def q_sample(x0, t, noise, alpha_bar):
    a = alpha_bar.gather(0, t)                       # RuntimeError on the CPU for t out of range
    shape = [x0.shape[0]] + [1] * (x0.dim() - 1)
    return a.sqrt().reshape(shape).to(x0.dtype) * x0 + (1 - a).sqrt().reshape(shape).to(x0.dtype) * noise
'''},
    "sqrt_index": {"q_sample": '''
def q_sample(x0, t, noise, alpha_bar):
    sqrt_ab = alpha_bar.sqrt()[t].to(x0.dtype)       # IndexError for t = T
    sqrt_1m = (1 - alpha_bar).sqrt()[t].to(x0.dtype)
    while sqrt_ab.dim() < x0.dim():
        sqrt_ab, sqrt_1m = sqrt_ab.unsqueeze(-1), sqrt_1m.unsqueeze(-1)
    return sqrt_ab * x0 + sqrt_1m * noise
'''},
    "none_reshape": {"q_sample": '''
def q_sample(x0, t, noise, alpha_bar):
    if (t < 0).any() or (t >= len(alpha_bar)).any():
        raise ValueError("t out of range")
    idx = (...,) + (None,) * (x0.dim() - 1)
    a = alpha_bar[t]
    return a.sqrt()[idx].to(x0.dtype) * x0 + (1 - a).sqrt()[idx].to(x0.dtype) * noise
'''},
    "float64_coefficients": {"q_sample": '''
def q_sample(x0, t, noise, alpha_bar):
    if int(t.max()) >= alpha_bar.numel() or int(t.min()) < 0:
        raise IndexError("timestep out of range")
    a = alpha_bar.double()[t]
    c1 = torch.sqrt(a).to(x0.dtype).view(-1, *([1] * (x0.dim() - 1)))
    c2 = torch.sqrt(1.0 - a).to(x0.dtype).view(-1, *([1] * (x0.dim() - 1)))
    return c1 * x0 + c2 * noise
'''},
    "cosine_python_list": {"make_beta_schedule": '''
def make_beta_schedule(kind, num_steps, beta_start=1e-4, beta_end=0.02, s=0.008, max_beta=0.999):
    def f(u):
        return math.cos((u + s) / (1 + s) * math.pi / 2) ** 2
    if kind == "linear":
        return torch.linspace(beta_start, beta_end, num_steps, dtype=torch.float64)
    if kind == "scaled_linear":
        return torch.linspace(math.sqrt(beta_start), math.sqrt(beta_end), num_steps, dtype=torch.float64) ** 2
    if kind == "cosine":
        return torch.tensor([min(1 - f((i + 1) / num_steps) / f(i / num_steps), max_beta)
                             for i in range(num_steps)], dtype=torch.float64)
    raise ValueError(f"kind must be one of linear, scaled_linear, cosine; got {kind!r}")
''', "alpha_bar_from_betas": '''
def alpha_bar_from_betas(betas):
    return (1 - betas).cumprod(0)
'''},

    # --- one sample per catalogued bug ---------------------------------------------------------------
    "silent_broadcast": {"q_sample": '''
def q_sample(x0, t, noise, alpha_bar):
    a = alpha_bar[t]
    return a.sqrt().to(x0.dtype) * x0 + (1 - a).sqrt().to(x0.dtype) * noise
'''},
    "off_by_one_t": {"q_sample": '''
def q_sample(x0, t, noise, alpha_bar):
    a = alpha_bar[t - 1]
    shape = (-1,) + (1,) * (x0.dim() - 1)
    return a.sqrt().view(shape).to(x0.dtype) * x0 + (1 - a).sqrt().view(shape).to(x0.dtype) * noise
'''},
    "materialized_broadcast": {"q_sample": '''
def q_sample(x0, t, noise, alpha_bar):
    a = alpha_bar[t]
    shape = (-1,) + (1,) * (x0.dim() - 1)
    sqrt_a = a.sqrt().to(x0.dtype).view(shape).expand_as(x0).contiguous()
    sqrt_1ma = (1 - a).sqrt().to(x0.dtype).view(shape).expand_as(x0).contiguous()
    return sqrt_a * x0 + sqrt_1ma * noise
'''},
    # The same off-by-one, by a student who kept the range check: input validation agrees with the reference,
    # and that must not hide the bug's name.
    "off_by_one_t_checked": {"q_sample": '''
def q_sample(x0, t, noise, alpha_bar):
    if (t < 0).any() or (t >= len(alpha_bar)).any():
        raise IndexError("t out of range")
    a = alpha_bar[t - 1].to(x0.dtype).reshape(-1, *([1] * (x0.ndim - 1)))
    return a.sqrt() * x0 + (1 - a).sqrt() * noise
'''},
    "python_loop_over_batch": {"q_sample": '''
def q_sample(x0, t, noise, alpha_bar):
    out = []
    for i in range(x0.shape[0]):
        a = alpha_bar[t[i]]
        out.append(a.sqrt().to(x0.dtype) * x0[i] + (1 - a).sqrt().to(x0.dtype) * noise[i])
    return torch.stack(out)
'''},
    "unclipped_cosine": {"make_beta_schedule": '''
def make_beta_schedule(kind, num_steps, beta_start=1e-4, beta_end=0.02, s=0.008, max_beta=0.999):
    if kind == "linear":
        return torch.linspace(beta_start, beta_end, num_steps, dtype=torch.float64)
    if kind == "scaled_linear":
        return torch.linspace(beta_start ** 0.5, beta_end ** 0.5, num_steps, dtype=torch.float64) ** 2
    if kind == "cosine":
        u = torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
        f = torch.cos((u + s) / (1 + s) * math.pi / 2) ** 2
        return 1 - f[1:] / f[:-1]
    raise ValueError(f"unknown kind {kind!r}: use linear, scaled_linear or cosine")
'''},
    "scaled_linear_typo": {"make_beta_schedule": '''
def make_beta_schedule(kind, num_steps, beta_start=1e-4, beta_end=0.02, s=0.008, max_beta=0.999):
    if kind == "linear":
        return torch.linspace(beta_start, beta_end, num_steps, dtype=torch.float64)
    if kind == "scaled_linear":
        return torch.linspace(beta_start, beta_end, num_steps, dtype=torch.float64) ** 2
    if kind == "cosine":
        u = torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
        f = torch.cos((u + s) / (1 + s) * math.pi / 2) ** 2
        return (1 - f[1:] / f[:-1]).clamp(max=max_beta)
    raise ValueError(f"unknown kind {kind!r}: use linear, scaled_linear or cosine")
'''},
    "low_precision_alpha_bar": {"alpha_bar_from_betas": '''
def alpha_bar_from_betas(betas):
    return torch.cumprod(1 - betas.half(), dim=0).to(betas.dtype)
'''},
    "half_precision_coefficients": {"q_sample": bug_cell("lab2_diffusion", "half_precision_coefficients")},

    # --- the reverse process: correct alternatives ----------------------------------------------------
    "posterior_padded_table": {"q_posterior": '''
def q_posterior(x0, xt, t, betas, alpha_bar):
    if (t < 0).any() or (t >= len(alpha_bar)).any():
        raise IndexError("t out of range")
    alpha_bar, betas = alpha_bar.to(x0.device), betas.to(x0.device)
    alpha_bar_prev = torch.cat([alpha_bar.new_ones(1), alpha_bar[:-1]])     # alpha_bar_0 = 1 first
    shape = [-1] + [1] * (x0.dim() - 1)
    a, a_prev, b = alpha_bar[t], alpha_bar_prev[t], betas[t]
    var = b * (1 - a_prev) / (1 - a)
    mean = (a_prev.sqrt() * b / (1 - a)).reshape(shape).to(x0.dtype) * x0 \\
        + ((1 - b).sqrt() * (1 - a_prev) / (1 - a)).reshape(shape).to(x0.dtype) * xt
    return mean, var.reshape(shape).to(x0.dtype)
'''},
    "loss_functional_mse": {"ddpm_loss": '''
def ddpm_loss(model, x0, t, noise, alpha_bar):
    x_t = q_sample(x0, t, noise, alpha_bar)
    return torch.nn.functional.mse_loss(model(x_t, t), noise)
'''},
    "step_eps_form": {"p_sample_step": '''
def p_sample_step(model, xt, t, betas, alpha_bar, noise):
    # Ho et al. eq. 11: mean = (x_t - beta_t / sqrt(1 - alpha_bar_t) * eps) / sqrt(alpha_t)
    shape = [-1] + [1] * (xt.dim() - 1)
    a = alpha_bar.to(xt.device)[t]
    b = betas.to(xt.device)[t]
    a_prev = torch.where(t > 0, alpha_bar.to(xt.device)[(t - 1).clamp(min=0)], torch.ones_like(a))
    eps = model(xt, t)
    mean = (xt - (b / (1 - a).sqrt()).reshape(shape).to(xt.dtype) * eps) / (1 - b).sqrt().reshape(shape).to(xt.dtype)
    sigma = (b * (1 - a_prev) / (1 - a)).sqrt().reshape(shape).to(xt.dtype)
    return mean + sigma * noise * (t > 0).reshape(shape).to(xt.dtype)
'''},

    # --- nothing differentiates the forward process, the posterior or the sampler (the text's table): ----
    # written under torch.no_grad(), or from plain Python numbers, they must get full marks
    "alpha_bar_python_loop": {"alpha_bar_from_betas": '''
def alpha_bar_from_betas(betas):
    values, running = [], 1.0
    for b in betas.tolist():                         # Python floats are float64: no rounding on the way
        running *= 1.0 - b
        values.append(running)
    return torch.tensor(values, dtype=betas.dtype, device=betas.device)
'''},
    "q_sample_no_grad": {"q_sample": '''
@torch.no_grad()                                     # the forward process has no parameters to train
def q_sample(x0, t, noise, alpha_bar):
    T = len(alpha_bar)
    if bool((t < 0).any()) or bool((t >= T).any()):
        raise IndexError(f"t must be in [0, {T - 1}]")
    ab = alpha_bar.to(x0.device)[t.to(x0.device)]
    ab = ab.reshape(-1, *([1] * (x0.ndim - 1)))
    return ab.sqrt().to(x0.dtype) * x0 + (1 - ab).sqrt().to(x0.dtype) * noise
'''},
    "loss_noising_no_grad": {"ddpm_loss": '''
def ddpm_loss(model, x0, t, noise, alpha_bar):
    with torch.no_grad():                            # only the model is trained: no graph for the noising
        x_t = q_sample(x0, t, noise, alpha_bar)
    eps_pred = model(x_t, t)
    return ((eps_pred - noise) ** 2).mean()
'''},
    "sampler_no_grad": {"q_posterior": '''
@torch.no_grad()
def q_posterior(x0, xt, t, betas, alpha_bar):
    T = alpha_bar.shape[0]
    if t.numel() and (int(t.min()) < 0 or int(t.max()) > T - 1):
        raise ValueError(f"timesteps must be in 0..{T - 1}")
    dev = x0.device
    t = t.to(dev)
    ab, b = alpha_bar.to(dev), betas.to(dev)
    ab_t = ab[t]
    ab_prev = torch.ones_like(ab_t)
    ab_prev[t > 0] = ab[t[t > 0] - 1]
    coef_x0 = ab_prev.sqrt() * b[t] / (1 - ab_t)
    coef_xt = (1 - b[t]).sqrt() * (1 - ab_prev) / (1 - ab_t)
    var = (1 - ab_prev) / (1 - ab_t) * b[t]
    view = lambda c: c.view(-1, *([1] * (x0.dim() - 1))).to(x0.dtype)
    return view(coef_x0) * x0 + view(coef_xt) * xt, view(var)
''', "p_sample_step": '''
@torch.no_grad()                                     # sampling never needs gradients
def p_sample_step(model, xt, t, betas, alpha_bar, noise):
    eps = model(xt, t)
    ab_t = alpha_bar.to(xt.device)[t.to(xt.device)].view(-1, *([1] * (xt.dim() - 1)))
    x0_hat = ((xt - torch.sqrt(1 - ab_t) * eps) / torch.sqrt(ab_t)).to(xt.dtype)
    mean, var = q_posterior(x0_hat, xt, t, betas, alpha_bar)
    keep = (t.to(xt.device) != 0).to(xt.dtype).view(-1, *([1] * (xt.dim() - 1)))
    return mean + keep * torch.sqrt(var) * noise
'''},

    # --- the reverse process: one sample per catalogued bug ---------------------------------------------
    "alpha_bar_prev_wraps": {"q_posterior": bug_cell("lab2_diffusion", "alpha_bar_prev_wraps")},
    "x0_as_target": {"ddpm_loss": bug_cell("lab2_diffusion", "x0_as_target")},
    "alpha_bar_in_mean": {"p_sample_step": bug_cell("lab2_diffusion", "alpha_bar_in_mean")},
    "variance_as_std": {"p_sample_step": bug_cell("lab2_diffusion", "variance_as_std")},

    # --- DDIM: correct variants, then one sample per catalogued bug ---------------------------------------------
    # the step from x_t and eps_hat directly, x0_hat substituted in (the "direction" written as one coefficient);
    # sigma from a table padded with 1 at index -1; the timesteps with NumPy arithmetic (the rule of section 7.7, in float64)
    "ddim_direction_form": {"ddim_step": '''
def ddim_step(model, xt, t, t_prev, alpha_bar, eta=0.0, noise=None):
    ab = alpha_bar.to(xt.device)
    view = lambda c: c.reshape(-1, *([1] * (xt.dim() - 1)))
    eps = model(xt, t)
    a_t = ab[t.to(xt.device)]
    a_s = torch.ones_like(a_t)
    later = t_prev.to(xt.device) >= 0
    a_s[later] = ab[t_prev.to(xt.device)[later]]
    var = eta ** 2 * (1 - a_s) / (1 - a_t) * (1 - a_t / a_s)
    coef_x = (a_s / a_t).sqrt()
    coef_eps = (1 - a_s - var).clamp(min=0).sqrt() - (a_s * (1 - a_t) / a_t).sqrt()
    out = view(coef_x) * xt + view(coef_eps) * eps
    if eta > 0:
        out = out + view(var.sqrt()) * (noise if noise is not None else torch.randn_like(xt))
    return out.to(xt.dtype)
''', "ddim_sigma": '''
def ddim_sigma(alpha_bar, t, t_prev, eta):
    padded = torch.cat([alpha_bar.new_ones(1), alpha_bar])       # padded[0] = 1: the clean image
    a_t, a_s = padded[t + 1], padded[(t_prev + 1).clamp(min=0)]
    variance = (1 - a_s) / (1 - a_t) * (1 - a_t / a_s)           # diffusers' _get_variance
    return eta * torch.sqrt(variance)
''', "ddim_timesteps": '''
import numpy as np


def ddim_timesteps(num_train_steps, num_steps, spacing="trailing"):
    if spacing not in ("leading", "trailing"):
        raise ValueError(f"spacing must be 'leading' or 'trailing', not {spacing!r}")
    if num_steps < 1 or num_steps > num_train_steps:
        raise ValueError("need 1 <= num_steps <= num_train_steps")
    if spacing == "leading":
        steps = np.arange(0, num_steps) * (num_train_steps // num_steps)
        return torch.from_numpy(steps[::-1].copy()).long()
    steps = np.round(num_train_steps - np.arange(num_steps) * (num_train_steps / num_steps)) - 1
    return torch.from_numpy(steps).long()
'''},
    # the trailing indices copied from diffusers' DDIMScheduler.set_timesteps (0.42.1): np.arange(T, 0, -T / n) adds
    # up its float64 steps another way than the rule of section 7.7. It rounds some exact halves the other way
    # (T = 7, n = 6: index 2 where the rule gives 3), and for some (T, n) it returns n + 1 indices, the last -1
    # (T = 49, n = 22; T = 1000, n = 61)
    "trailing_np_arange": {"ddim_timesteps": '''
import numpy as np


def ddim_timesteps(num_train_steps, num_steps, spacing="trailing"):
    if spacing not in ("leading", "trailing"):
        raise ValueError(f"spacing must be 'leading' or 'trailing', not {spacing!r}")
    if num_steps < 1 or num_steps > num_train_steps:
        raise ValueError("need 1 <= num_steps <= num_train_steps")
    if spacing == "leading":
        steps = np.arange(0, num_steps) * (num_train_steps // num_steps)
        return torch.from_numpy(steps[::-1].copy()).long()
    steps = np.round(np.arange(num_train_steps, 0, -num_train_steps / num_steps)) - 1
    return torch.from_numpy(steps).long()
'''},
    "trailing_as_leading": {"ddim_timesteps": bug_cell("lab2_diffusion", "trailing_as_leading")},
    # --- classifier-free guidance: two calls instead of one batched call, and the dropout drawn with bernoulli
    "cfg_two_calls": {"cfg_eps": '''
def cfg_eps(model, x, t, y, guidance_scale, null_label):
    eps_uncond = model(x, t, torch.full_like(y, null_label))
    eps_cond = model(x, t, y)
    return torch.lerp(eps_uncond, eps_cond, guidance_scale)
''', "drop_labels": '''
def drop_labels(y, p_uncond, null_label, generator=None):
    keep = torch.bernoulli(torch.full(y.shape, 1.0 - p_uncond), generator=generator).bool()
    out = y.clone()
    out[~keep] = null_label
    return out
'''},
    # --- arguments changed in place (issue 41, class 1): the grader writes the kernel's changes back into the
    # test's tensors, so the tests that say t_prev and y stay as they were fail as they do in the notebook
    # t_prev clamped in place, after the mask of the clean image was taken: every sigma right, the caller's t_prev
    # changed (the sampler reuses it)
    "ddim_sigma_clamps_t_prev": {"ddim_sigma": '''
def ddim_sigma(alpha_bar, t, t_prev, eta):
    clean = t_prev < 0
    a_t = alpha_bar[t]
    a_prev = torch.where(clean, torch.ones_like(a_t), alpha_bar[t_prev.clamp_(min=0)])
    return eta * ((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)).sqrt()
'''},
    # the same clamp in place, on its own copy: free ("t and t_prev are not modified" says nothing of copies)
    "ddim_sigma_clamps_a_copy": {"ddim_sigma": '''
def ddim_sigma(alpha_bar, t, t_prev, eta):
    index = t_prev.clone()
    clean = index < 0
    a_t = alpha_bar[t]
    a_prev = torch.where(clean, torch.ones_like(a_t), alpha_bar[index.clamp_(min=0)])
    return eta * ((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)).sqrt()
'''},
    # the dropped labels written into y itself, and y returned
    "drop_labels_in_place": {"drop_labels": '''
def drop_labels(y, p_uncond, null_label, generator=None):
    dropped = torch.rand(y.shape, generator=generator).to(y.device) < p_uncond
    y[dropped] = null_label
    return y
'''},
    # the sampling loop over indices, the clip with torch.where
    "ddim_loop_variant": {"ddim_sample": '''
def ddim_sample(model, x_T, alpha_bar, num_steps, spacing="trailing", eta=0.0, generator=None):
    steps = ddim_timesteps(len(alpha_bar), num_steps, spacing)
    x = x_T
    for i in range(len(steps)):
        t = steps[i].repeat(x.shape[0]).to(x.device)
        t_prev = (steps[i + 1] if i + 1 < len(steps) else torch.tensor(-1)).repeat(x.shape[0]).to(x.device)
        z = None
        if eta > 0:
            z = torch.randn(x_T.shape, generator=generator).to(dtype=x_T.dtype, device=x_T.device)
        x = ddim_step(model, x, t, t_prev, alpha_bar, eta=eta, noise=z)
    return x
''', "clip_x0_noise": '''
def clip_x0_noise(eps_hat, xt, t, alpha_bar, limit=1.0):
    ab = alpha_bar.to(xt.device)[t.to(xt.device)].reshape(-1, *([1] * (xt.dim() - 1)))
    x0 = (xt - torch.sqrt(1 - ab) * eps_hat) / torch.sqrt(ab)
    x0 = torch.where(x0 > limit, limit, torch.where(x0 < -limit, -limit, x0))
    return ((xt - torch.sqrt(ab) * x0) / torch.sqrt(1 - ab)).to(xt.dtype)
'''},
    "labels_never_dropped": {"drop_labels": bug_cell("lab2_diffusion", "labels_never_dropped")},
    # a fixed number dropped: exactly round(p_uncond * B) labels, at random places. Every share comes out right, but the
    # labels are not dropped independently (Ho & Salimans, Algorithm 1): the count never varies from batch to batch
    "drop_labels_exact_count": {"drop_labels": '''
def drop_labels(y, p_uncond, null_label, generator=None):
    count = round(p_uncond * y.numel())
    places = torch.randperm(y.numel(), generator=generator)[:count].to(y.device)
    out = y.clone()
    out.view(-1)[places] = null_label
    return out
'''},
    "guidance_halves_swapped": {"cfg_eps": bug_cell("lab2_diffusion", "guidance_halves_swapped")},
    "guidance_scale_as_w": {"cfg_eps": bug_cell("lab2_diffusion", "guidance_scale_as_w")},
    "alpha_prev_of_previous_ddpm_step": {"ddim_step": bug_cell("lab2_diffusion", "alpha_prev_of_previous_ddpm_step")},
    "sigma_from_one_step_beta": {"ddim_sigma": bug_cell("lab2_diffusion", "sigma_from_one_step_beta")},
}

FULL = {"full": True}


def _bug(bug_id: str, function: str) -> dict:
    return {"full": False, "bug": bug_id, "function": function}


EXPECTED = {
    "reference": FULL, "gather": FULL, "sqrt_index": FULL, "none_reshape": FULL, "float64_coefficients": FULL,
    "cosine_python_list": FULL,
    "silent_broadcast": _bug("silent_broadcast", "q_sample"),
    "off_by_one_t": _bug("off_by_one_t", "q_sample"),
    "off_by_one_t_checked": _bug("off_by_one_t", "q_sample"),
    "materialized_broadcast": _bug("materialized_broadcast", "q_sample"),
    "python_loop_over_batch": _bug("python_loop_over_batch", "q_sample"),
    "unclipped_cosine": _bug("unclipped_cosine", "make_beta_schedule"),
    "scaled_linear_typo": _bug("scaled_linear_typo", "make_beta_schedule"),
    "low_precision_alpha_bar": _bug("low_precision_alpha_bar", "alpha_bar_from_betas"),
    "half_precision_coefficients": _bug("half_precision_coefficients", "q_sample"),
    "posterior_padded_table": FULL, "loss_functional_mse": FULL, "step_eps_form": FULL,
    "alpha_bar_python_loop": FULL, "q_sample_no_grad": FULL, "loss_noising_no_grad": FULL, "sampler_no_grad": FULL,
    "alpha_bar_prev_wraps": _bug("alpha_bar_prev_wraps", "q_posterior"),
    "x0_as_target": _bug("x0_as_target", "ddpm_loss"),
    "alpha_bar_in_mean": _bug("alpha_bar_in_mean", "p_sample_step"),
    "variance_as_std": _bug("variance_as_std", "p_sample_step"),
    "ddim_direction_form": FULL,
    "trailing_as_leading": _bug("trailing_as_leading", "ddim_timesteps"),
    "trailing_np_arange": {"failed_tests": ["ddim_timesteps_value"]},
    "alpha_prev_of_previous_ddpm_step": _bug("alpha_prev_of_previous_ddpm_step", "ddim_step"),
    "sigma_from_one_step_beta": _bug("sigma_from_one_step_beta", "ddim_sigma"),
    "cfg_two_calls": FULL, "ddim_loop_variant": FULL, "ddim_sigma_clamps_a_copy": FULL,
    "ddim_sigma_clamps_t_prev": {"failed_tests": ["ddim_sigma_value"], "status": {"ddim_sigma_value": "failed"},
                                 "message": {"ddim_sigma_value": "ddim_sigma changed t or t_prev in place"}},
    "drop_labels_in_place": {"failed_tests": ["drop_labels_value"], "status": {"drop_labels_value": "failed"}},
    "labels_never_dropped": _bug("labels_never_dropped", "drop_labels"),
    "drop_labels_exact_count": {"failed_tests": ["drop_labels_value"]},
    "guidance_halves_swapped": _bug("guidance_halves_swapped", "cfg_eps"),
    "guidance_scale_as_w": _bug("guidance_scale_as_w", "cfg_eps"),
}

# A bug in q_sample also fails ddpm_loss's tests (it noises with your q_sample); one in q_posterior fails
# p_sample_step's (the reference's step calls it); the visible tests of both build alpha_bar with your
# alpha_bar_from_betas. ddim_step calls your ddim_sigma, and ddim_sample your ddim_timesteps and ddim_step.
DEPENDS = {"ddpm_loss": ["q_sample", "alpha_bar_from_betas"], "p_sample_step": ["q_posterior", "alpha_bar_from_betas"],
           "ddim_step": ["ddim_sigma"], "ddim_sample": ["ddim_step", "ddim_timesteps", "ddim_sigma"]}


def _student(name: str) -> str:
    return name if name == "reference" else f"lab2_{name}"


SAMPLES = {_student(name): {"cells": cells, "expect": EXPECTED[name]} for name, cells in CELLS.items()}
