// Types for parse-prometheus-text-format (the package ships none): prom2json's shape.
declare module 'parse-prometheus-text-format' {
  interface Family {
    name: string;
    help?: string;
    type: 'GAUGE' | 'COUNTER' | 'UNTYPED' | 'HISTOGRAM' | 'SUMMARY';
    metrics: { value?: string; labels?: Record<string, string>; buckets?: Record<string, string>; quantiles?: Record<string, string> }[];
  }
  export default function parsePrometheusTextFormat(text: string): Family[];
}
