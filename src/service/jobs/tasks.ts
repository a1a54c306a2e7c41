// The tasks of the customization worker pool, dispatched by `op`. Each task module is imported on
// first use so a worker that only processes datasets never loads the native core.
import type { ProcessDatasetTask } from './datasets-task.ts';
import type { InitEncoderTask, TrainTask } from './train-task.ts';
import type { EvaluateTask } from './evaluate-task.ts';

export type Task = ProcessDatasetTask | TrainTask | EvaluateTask | InitEncoderTask;

export async function runTask(task: Task): Promise<unknown> {
  switch (task.op) {
    case 'process_dataset': return (await import('./datasets-task.ts')).processDataset(task);
    case 'train': return (await import('./train-task.ts')).train(task);
    case 'init_encoder': return (await import('./train-task.ts')).initEncoder(task);
    case 'evaluate': return (await import('./evaluate-task.ts')).evaluate(task);
    default: throw new Error(`unknown task ${(task as { op: string }).op}`);
  }
}
