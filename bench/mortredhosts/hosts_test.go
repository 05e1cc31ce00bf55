package mortredhosts

import "testing"

func TestRequestsOf(t *testing.T) {
	text := `# HELP mortred_gateway_requests_total Requests answered, by catalog id and HTTP status.
# TYPE mortred_gateway_requests_total counter
mortred_gateway_requests_total{model="PPOCR_CLS",status="200"} 1234
mortred_gateway_requests_total{model="PPOCR_CLS",status="503"} 6
mortred_gateway_requests_total{model="PPOCR_CLS2",status="200"} 100
mortred_gateway_requests_total{model="TESTMODEL",status="200"} 1e+06
mortred_gateway_requests_total_other{model="PPOCR_CLS"} 5
mortred_gateway_requests_total{model="PPOCR_CLS",status="500"}
`
	if got := requestsOf(text, "PPOCR_CLS"); got != 1240 {
		t.Errorf("PPOCR_CLS: %v, want 1240", got)
	}
	if got := requestsOf(text, "TESTMODEL"); got != 1e6 {
		t.Errorf("TESTMODEL: %v, want 1e6", got)
	}
	if got := requestsOf(text, "NONE"); got != 0 {
		t.Errorf("NONE: %v", got)
	}
}
