/**
 * fraud_router: picks a model per payment and returns early when none is
 * needed, the pipeline Triton users write as a Python BLS model.
 *
 *   amount <  skip_below  -> probability 0, no model runs
 *   amount <  large_from  -> fraud_detector
 *   otherwise             -> fraud_detector_large
 *
 * The features go to the chosen model as they came (no copy), and the
 * model's answer comes back in the same { name, datatype, shape, data } form.
 */
export default class FraudRouter {
  async initialize(args) {
    this.infer = args.infer;
    const params = args.modelConfig.parameters;
    this.skipBelow = Number(params.skip_below?.string_value ?? 10);
    this.largeFrom = Number(params.large_from?.string_value ?? 1000);
  }

  /** One response per request; the requests of a batch are routed independently. */
  async execute(requests) {
    return Promise.all(requests.map((request) => this.route(request)));
  }

  async route(request) {
    const features = request.inputs.find((t) => t.name === 'input_features');
    const amount = request.inputs.find((t) => t.name === 'amount').data[0];
    if (amount < this.skipBelow) return answer(0, 'skipped');
    const model = amount >= this.largeFrom ? 'fraud_detector_large' : 'fraud_detector';
    try {
      const { outputs } = await this.infer({
        model,
        // fraud_detector batches: the features become a batch of one.
        inputs: [{ ...features, shape: [1, 10] }],
        outputs: ['fraud_probability'],
      });
      return answer(outputs[0].data[0], model);
    } catch (err) {
      return { error: `scoring with ${model} failed: ${err.message}` };
    }
  }
}

function answer(probability, route) {
  return {
    outputs: [
      { name: 'fraud_probability', datatype: 'FP32', shape: [1], data: new Float32Array([probability]) },
      { name: 'route', datatype: 'BYTES', shape: [1], data: [route] },
    ],
  };
}
