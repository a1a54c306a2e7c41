// Whether a model can be a judge: the one check behind PUT /judge (src/service/judge/index.ts) and a GRPO
// job's rl_config.llm_judge_model (src/service/training/rl-jobs.ts). A judge is a decoder the service serves:
// a catalog base model, or a decoder the team trained (its training job id). 404 when neither knows the id,
// 422 naming the path when it is an encoder or cannot serve inference.
import type { Store } from '../../store/index.ts';
import type { Catalog } from '../catalog.ts';
import { NotFoundError, ValidationError } from '../errors.ts';

export async function checkJudgeModel(
  d: { store: Store; catalog: Catalog },
  teamId: string,
  model: string,
  path = '/model',
): Promise<void> {
  const bad = (message: string, keyword: string): never => {
    throw new ValidationError(message, [{ path, message, keyword }]);
  };
  const job = await d.store.trainingJobs.get(model);
  if (job && job.team_id === teamId) {
    if (job.task_type !== 'decoder')
      bad(`Judge model ${model} is an ${job.task_type}; a judge must be a decoder`, 'judge_not_decoder');
    return;
  }
  const e = await d.catalog.get(model);
  if (!e)
    throw new NotFoundError(
      `Judge model ${model} not found: a judge is a decoder from GET /base-models or a trained decoder`,
    );
  if (e.task_type !== 'decoder')
    bad(`Judge model ${model} is an ${e.task_type}; a judge must be a decoder`, 'judge_not_decoder');
  if (!e.supports_inference) bad(`Judge model ${model} cannot serve inference`, 'judge_not_servable');
}
