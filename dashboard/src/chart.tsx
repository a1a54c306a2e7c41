// A line chart (uPlot): x values and one or more named series; redrawn when the data change.
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

export interface Series {
  label: string;
  values: Array<number | null>;
}

/** tick labels that stay readable for tiny values (costs of 0.00001) and large ones */
const tick = (v: number) => (v !== 0 && Math.abs(v) < 0.01 ? v.toExponential(1) : String(Number(v.toPrecision(4))));

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2'];

export function LineChart(props: {
  x: number[];
  series: Series[];
  xLabel: string;
  height?: number;
  testid?: string;
  time?: boolean;
}) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = `${props.series.map((s) => s.label).join('|')}:${props.time ? 't' : 'n'}`;
  const shapeRef = useRef('');

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const data = [props.x, ...props.series.map((s) => s.values)] as uPlot.AlignedData;
    if (plot.current && shapeRef.current === shape) {
      plot.current.setData(data);
      return;
    }
    plot.current?.destroy();
    shapeRef.current = shape;
    plot.current = new uPlot(
      {
        width: Math.max(300, el.clientWidth || 600),
        height: props.height ?? 240,
        scales: { x: { time: !!props.time } },
        axes: [{ label: props.xLabel }, { values: (_u, vals) => vals.map(tick), size: 60 }],
        series: [
          { label: props.xLabel },
          ...props.series.map((s, i) => ({
            label: s.label,
            stroke: COLORS[i % COLORS.length],
            width: 2,
            spanGaps: true,
            points: { show: true, size: 5 },
          })),
        ],
      },
      data,
      el,
    );
  });
  useEffect(
    () => () => {
      plot.current?.destroy();
      plot.current = null;
    },
    [],
  );
  return <div class="chart" ref={box} data-testid={props.testid} data-points={props.x.length} />;
}
