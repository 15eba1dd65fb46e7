package provider

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newDatabusConfigResource() resource.Resource { return &databusConfigResource{} }

type databusConfigResource struct{ base }

type databusConfigModel struct {
	ID                 types.String `tfsdk:"id"`
	Tenant             types.String `tfsdk:"tenant"`
	Name               types.String `tfsdk:"name"`
	Description        types.String `tfsdk:"description"`
	Document           types.String `tfsdk:"document"`
	NormalizedDocument types.String `tfsdk:"normalized_document"`
	Version            types.Int64  `tfsdk:"version"`
}

type databusConfigJSON struct {
	Tenant      string          `json:"tenant"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Version     int64           `json:"version"`
	Document    json.RawMessage `json:"document"`
}

func (r *databusConfigResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_databus_config"
}

func (r *databusConfigResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A Databus configuration: the streams an agent following it maps to topics, with their " +
			"producer settings, applied live by every agent. The control plane fills in defaults " +
			"(`normalized_document`); the provider compares what it holds with what it last wrote, so a change made " +
			"outside Terraform shows as a change of `document`. Changing `tenant` or `name` replaces it.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "`<tenant>/<name>`."},
			"tenant": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The tenant's slug; default: the caller's only tenant."},
			"name": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "The configuration's name, which agents are started with."},
			"description": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Description: "Free text, at most 500 characters."},
			"document": schema.StringAttribute{Required: true,
				Description: "The configuration document as JSON (`jsonencode({streams = {events = {topic = \"acme.orders\"}}})`)."},
			"normalized_document": schema.StringAttribute{Computed: true,
				Description: "The document as the control plane holds it: every stream with every setting, defaults filled in."},
			"version": schema.Int64Attribute{Computed: true,
				Description: "The configuration's version, which agents report."},
		},
	}
}

func (r *databusConfigResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

// canonical re-encodes JSON with sorted keys and no spaces, so two encodings of one
// document compare equal.
func canonical(raw []byte) (string, error) {
	var value any
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.UseNumber()
	if err := decoder.Decode(&value); err != nil {
		return "", err
	}
	encoded, err := json.Marshal(value)
	return string(encoded), err
}

// document parses the configured document: a JSON object, or an error on the attribute.
func document(v types.String, diags *diag.Diagnostics) map[string]any {
	var doc map[string]any
	decoder := json.NewDecoder(bytes.NewReader([]byte(v.ValueString())))
	decoder.UseNumber()
	if err := decoder.Decode(&doc); err != nil || doc == nil {
		diags.AddAttributeError(path.Root("document"), "Invalid Databus document",
			"document must be a JSON object, e.g. jsonencode({streams = {...}})")
	}
	return doc
}

// databusState is the configuration as the API holds it. configured is the document
// the configuration gives: kept as the state's document while the API's normalised
// one is the one written last (lastNormalized), else replaced by the API's so the
// plan shows the drift.
func databusState(c databusConfigJSON, configured types.String, lastNormalized types.String, diags *diag.Diagnostics) databusConfigModel {
	normalized, err := canonical(c.Document)
	if err != nil {
		diags.AddError("Unreadable Databus document", "the API answered a document that is not JSON: "+err.Error())
	}
	doc := configured
	if doc.IsNull() || doc.IsUnknown() || lastNormalized.ValueString() != normalized {
		doc = types.StringValue(normalized)
	}
	return databusConfigModel{
		ID:                 types.StringValue(c.Tenant + "/" + c.Name),
		Tenant:             types.StringValue(c.Tenant),
		Name:               types.StringValue(c.Name),
		Description:        types.StringValue(c.Description),
		Document:           doc,
		NormalizedDocument: types.StringValue(normalized),
		Version:            types.Int64Value(c.Version),
	}
}

func (r *databusConfigResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan databusConfigModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	doc := document(plan.Document, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{"document": doc}
	b.str("tenant", plan.Tenant)
	b.str("name", plan.Name)
	b.str("description", plan.Description)
	var created databusConfigJSON
	if err := r.client.Post(ctx, "databus-configs", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not create the Databus configuration", err, r.attrs())
		return
	}
	normalized, _ := canonical(created.Document)
	state := databusState(created, plan.Document, types.StringValue(normalized), &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *databusConfigResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state databusConfigModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	var config databusConfigJSON
	err := r.client.Get(ctx, "databus-configs/"+escape(name), tenantQuery(tenant), &config)
	gone, err := r.client.Gone(ctx, err, tenant)
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the Databus configuration", err, r.attrs())
		return
	}
	next := databusState(config, state.Document, state.NormalizedDocument, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, next)...)
}

func (r *databusConfigResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state databusConfigModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := changes{body{}}
	c.str("description", plan.Description, state.Description)
	if !plan.Document.Equal(state.Document) {
		c.body["document"] = document(plan.Document, &resp.Diagnostics)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	var config databusConfigJSON
	if err := r.client.Patch(ctx, "databus-configs/"+escape(name), tenantQuery(tenant), c.body, &config); err != nil {
		addAPIError(&resp.Diagnostics, "Could not change the Databus configuration", err, r.attrs())
		return
	}
	normalized, _ := canonical(config.Document)
	next := databusState(config, plan.Document, types.StringValue(normalized), &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, next)...)
}

func (r *databusConfigResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state databusConfigModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	_, err := r.client.Gone(ctx, r.client.Delete(ctx, "databus-configs/"+escape(name), tenantQuery(tenant)), tenant)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not delete the Databus configuration", err, r.attrs())
	}
}

// ImportState takes `<tenant>/<name>`; the document is read back as the API holds it.
func (r *databusConfigResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importScoped(ctx, req, resp)
}
